// The model used when init_from_scratch runs without a model_path: a tiny Qwen2-style
// decoder over a byte-level vocabulary (256 bytes + 2 specials), small enough for the
// CPU demo and tests.
#pragma once

#include <string>

namespace areal {

std::string builtin_tiny_config_json();

}  // namespace areal
