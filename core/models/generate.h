// Text continuation and held-out loss for a causal LM (what `fsdpp generate` and
// `fsdpp eval` compute).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/models/causal_lm.h"

namespace fsdpp::models {

struct SamplingOptions {
  int64_t max_new_tokens = 32;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off (nucleus sampling)
  uint64_t seed = 0;
};

// Keeps the top_k largest logits and the smallest set of most likely tokens whose
// probability reaches top_p; the rest become -inf. logits: [vocab].
torch::Tensor filter_logits(const torch::Tensor& logits, int64_t top_k, double top_p);

// Appends up to max_new_tokens tokens to `prompt` (the full sequence is recomputed each
// step; the context is cut to the model's max_positions).
std::vector<int64_t> generate(const CausalLm& lm, std::vector<int64_t> prompt, const SamplingOptions& options);

struct EvalResult {
  double loss = 0;        // mean next-token cross-entropy over all target tokens
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;     // target tokens scored
  // Only with keep_logits: every window's inputs [W, T] (int64) and logits [W, T, vocab]
  // (float32, on the CPU), for comparison with another implementation.
  torch::Tensor input_ids, logits;
};

// Window i = tokens[i*T .. (i+1)*T] (T+1 tokens): inputs its first T, targets its last T.
// All non-overlapping windows that fit; throws if not even one does. `progress` (if set) is
// called after each forward pass with the windows scored so far and the total.
EvalResult evaluate(const CausalLm& lm, const torch::Tensor& tokens, int64_t seq_len, int64_t batch_size = 8,
                    bool keep_logits = false,
                    const std::function<void(int64_t windows_done, int64_t windows_total)>& progress = {});

}  // namespace fsdpp::models
