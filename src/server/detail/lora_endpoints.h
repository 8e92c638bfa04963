// POST /v1/load_lora_adapter and /v1/unload_lora_adapter, as vLLM's OpenAI server offers them
// (there behind VLLM_ALLOW_RUNTIME_LORA_UPDATING; here whenever the server runs --enable-lora).
// Both run on the I/O thread and block it while the engine takes or drops the adapter (reading
// the files, then one copy into a slot between two steps).
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "server/generator.h"
#include "server/protocol.h"

namespace ib::detail {

// {"lora_name", "lora_path"} -> 200 "Success: LoRA adapter 'NAME' added successfully (N ms)."
// and the adapter joins model.lora_adapters. 400: a bad body, a name already served, an adapter
// the engine refuses (rank, shapes, --max-loras: the slots are full; unload one first).
std::variant<std::string, ApiError> load_lora_body(std::string_view body, Generator& generator,
                                                   ServedModel& model);
// {"lora_name"} -> 200 "Success: LoRA adapter 'NAME' removed successfully."; 404 model_not_found
// for a name not loaded; 400 while requests still use it.
std::variant<std::string, ApiError> unload_lora_body(std::string_view body, Generator& generator,
                                                     ServedModel& model);

}  // namespace ib::detail
