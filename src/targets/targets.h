// Front door of targets/: what a benchmark drives. target.h is the interface; "native" runs the
// embedded engine in-process; "openai"/"openai-chat" drive an OpenAI-compatible HTTP server.
#pragma once

#include <functional>
#include <memory>

#include "core/result.h"
#include "targets/native_target.h"  // IWYU pragma: export
#include "targets/openai_target.h"  // IWYU pragma: export
#include "targets/target.h"         // IWYU pragma: export

namespace ib {

// The options of every target kind; each target reads its own part.
struct TargetOptions {
  NativeTargetOptions native;
  OpenAITargetOptions openai;
};
// A target plugin builds an (unconnected) target; setup() loads or connects.
using TargetFactory = std::function<Result<std::unique_ptr<Target>>(const TargetOptions&)>;

}  // namespace ib
