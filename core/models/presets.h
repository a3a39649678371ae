// Named from-scratch configurations for every family (`fsdpp train --from-scratch
// --model-type T --model-size S`), and the initialisation Hugging Face applies to a new
// model (PreTrainedModel._init_weights with initializer_range 0.02).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/models/causal_lm.h"

namespace fsdpp::models {

// The config.json of `size` for `model_type` (gpt2: tiny, mini, mini256, 124M, 355M, 774M, 1.5B;
// opt: tiny, mini, 125M, 350M, 1.3B; llama/mistral: the llama presets; qwen2/qwen3/qwen3_moe:
// tiny, the llama one with the family's options (Qwen3's head_dim twice hidden / heads,
// Qwen3-MoE's 4 experts), plus Qwen2.5 0.5B/1.5B/7B, Qwen3 mini (the CPU benchmark's: 4
// layers of width 128, head_dim 64) and 0.6B/1.7B/4B/8B, Qwen3 30B-A3B;
// gemma2/gemma3_text: tiny, the llama one with head_dim twice hidden / heads, a window of 8
// and the family's layer pattern, plus Gemma 2 2B and Gemma 3 1B; phi3: tiny (a half
// rotary), 3.8B (Phi-3 mini) and 14B (Phi-4); phi: tiny, 1.3B (Phi-1.5), 2.7B (Phi-2); falcon: tiny, 7B; mixtral: tiny
// (4 experts, 2 per token), mini (the CPU benchmark's: 4 layers of width 128, 8 experts of
// width 256, 2 per token), 8x7B). vocab_size > 0 replaces the preset's vocabulary size. Throws std::invalid_argument
// naming the unknown type or size and listing the known ones.
nlohmann::json from_scratch_config(const std::string& model_type, const std::string& size, int64_t vocab_size = 0);
std::vector<std::string> from_scratch_sizes(const std::string& model_type);

// Every parameter with 2+ dimensions (matmuls, embeddings) ~ N(0, 0.02^2); 1-D
// parameters named "*bias" = 0, other 1-D parameters (LayerNorm/RMSNorm weights) =
// initial_norm_weight(lm.model_type).
// Each value depends only on (seed, parameter name, row index): not on the world size,
// on which rows a process makes, or in what order (see init_rows). A tied tensor is
// initialised once, under its first name in named_parameters order (GPT-2's
// "transformer.wte.weight", not "lm_head.weight"). Parameters of any dtype; throws
// std::invalid_argument naming a parameter on the meta device (init_rows makes its rows).
void init_from_scratch(CausalLm& lm, uint64_t seed);

// What a norm weight starts at, as transformers' _init_weights sets it: 1 for norms that
// multiply by w, 0 for Gemma's, which multiply by (1 + w).
double initial_norm_weight(const std::string& model_type);

// Rows [first_row, first_row + out.size(0)) of parameter `name` (full shape `shape`) exactly as
// init_from_scratch(seed) sets them (out: fp32, contiguous, shape [rows, shape[1:]...]; a 0-d or
// 1-d parameter counts its elements as rows). A normal row is drawn with its own generator,
// seeded from (seed, FNV-1a of the name, row) through splitmix64, so any split of the rows over
// processes gives bitwise the same values. Throws std::invalid_argument naming the parameter
// when `out` does not fit. 1-D non-bias parameters are set to `norm_weight`.
void init_rows(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed, int64_t first_row,
               at::Tensor out, double norm_weight = 1.0);

// init_rows bound to `seed` and the family's initial_norm_weight: the row source deferred
// initialisation materialises from (FsdpOptions::materialize).
std::function<void(const std::string& name, const std::vector<int64_t>& shape, int64_t first_row, at::Tensor out)>
seeded_rows(uint64_t seed, const std::string& model_type);

}  // namespace fsdpp::models
