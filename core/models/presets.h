// Named from-scratch configurations for every family (`fsdpp train --from-scratch
// --model-type T --model-size S`), and the initialisation Hugging Face applies to a new
// model (PreTrainedModel._init_weights with initializer_range 0.02).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/models/causal_lm.h"

namespace fsdpp::models {

// The config.json of `size` for `model_type` (gpt2: tiny, mini, 124M, 355M, 774M, 1.5B;
// opt: tiny, mini, 125M, 350M, 1.3B; llama/mistral: the llama presets). vocab_size > 0
// replaces the preset's vocabulary size. Throws std::invalid_argument naming the
// unknown type or size and listing the known ones.
nlohmann::json from_scratch_config(const std::string& model_type, const std::string& size, int64_t vocab_size = 0);
std::vector<std::string> from_scratch_sizes(const std::string& model_type);

// Every parameter with 2+ dimensions (matmuls, embeddings) ~ N(0, 0.02^2); 1-D
// parameters named "*bias" = 0, other 1-D parameters (LayerNorm/RMSNorm weights) = 1.
// Deterministic from `seed` alone and independent of the world size.
void init_from_scratch(CausalLm& lm, uint64_t seed);

}  // namespace fsdpp::models
