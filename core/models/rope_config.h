// The rotary settings of a config.json in both layouts (transformers 5's rope_parameters, the
// older top-level rope_theta and rope_scaling), as LlamaConfig::from_json reads them, for a
// family whose other keys are its own (Falcon).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/models/llama.h"

namespace fsdpp::models {

// Sets c.rope_theta (from c.rope_theta's value as the default), c.rope_scaling and
// c.rope_linear_factor; a rope type or key it does not compute is refused with
// std::invalid_argument naming `source` and the key.
void read_rope_settings(const nlohmann::json& json, const std::string& source, LlamaConfig& c);

}  // namespace fsdpp::models
