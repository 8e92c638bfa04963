// Internal to engine/arch: one accessor per family file, listed by registry.cpp.
#pragma once

#include "engine/arch/architecture.h"

namespace ib::arch {

const Architecture& llama_architecture();      // llama.cpp
const Architecture& mistral_architecture();    // llama.cpp
const Architecture& qwen2_architecture();      // llama.cpp
const Architecture& phi3_architecture();       // phi3.cpp
const Architecture& mixtral_architecture();    // mixtral.cpp
const Architecture& gemma2_architecture();     // gemma2.cpp
const Architecture& deepseek2_architecture();  // deepseek2.cpp
const Architecture& qwen2vl_architecture();    // qwen2vl.cpp

}  // namespace ib::arch
