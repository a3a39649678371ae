// The registry of model families: one row per family names the config.json model_type
// values it reads, its config reader (which also builds its model), how its checkpoints
// name their tensors, and its FSDP unit. Adding a family is its own file under core/models/
// plus one row in families.cpp; nothing else dispatches on model_type to build or load.
//
// Tensor names: every family's modules register their parameters under the names its
// Hugging Face checkpoints use (with or without the base model's prefix, which
// hf_checkpoint.cpp resolves), so the map from checkpoint to parameter is the identity.
// Fused tensors (Phi-3's qkv_proj and gate_up_proj) are fused parameters, split in the
// forward pass as transformers splits them: loading and exporting need no split or re-fuse,
// and a fused tensor of the wrong size is refused by its shape.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/models/causal_lm.h"

namespace fsdpp::models {

// A tensor a family's checkpoints may hold that no parameter reads, and why leaving it
// unread changes nothing. Matched by name suffix.
struct UnreadTensor {
  std::string suffix;
  std::string why;
};

struct Family {
  std::string name;                      // for messages and docs, e.g. "GPT-2"
  std::vector<std::string> model_types;  // the config.json model_type values it reads
  std::string unit;                      // Module::name() of its decoder layer: the FSDP unit and AC target
  // config.json (whose model_type is one of model_types) -> the checked, typed config and the
  // model it builds. Throws std::invalid_argument naming `source` and the offending key.
  std::function<CausalLmConfig(const nlohmann::json& config, const std::string& source)> read;
  std::vector<UnreadTensor> unread_tensors;
};

// Every family, in the order supported_model_types() lists their model types.
const std::vector<Family>& families();

// supported_model_types() as one line: "gpt2, opt, ...".
std::string model_type_list();

// The family that reads `model_type`. Throws std::invalid_argument naming `source` and
// listing the supported types.
const Family& family_of(const std::string& model_type, const std::string& source);

}  // namespace fsdpp::models
