// A small GPT-style decoder for sharding tests and `fsdpp equiv`: learned positions,
// pre-LayerNorm blocks, causal multi-head attention in exact math, tanh-GELU MLP, and
// an LM head tied to the token embedding. Every submodule is called through nn::call,
// so any of them can be wrapped.
#pragma once

#include <torch/torch.h>

namespace fsdpp::models {

struct TinyTransformerConfig {
  int64_t vocab = 61;  // odd on purpose: rows do not divide evenly over ranks
  int64_t seq_len = 8;
  int64_t dim = 12;
  int64_t heads = 2;
  int64_t layers = 3;
};

struct TinyBlockImpl : torch::nn::Module {
  explicit TinyBlockImpl(const TinyTransformerConfig& c);
  torch::Tensor forward(torch::Tensor x);  // [batch, seq, dim] -> same
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc_proj{nullptr};
};
TORCH_MODULE(TinyBlock);

struct TinyTransformerImpl : torch::nn::Module {
  explicit TinyTransformerImpl(const TinyTransformerConfig& c);
  torch::Tensor forward(torch::Tensor tokens);  // [batch, seq] int64 -> logits [batch, seq, vocab]
  TinyTransformerConfig config;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks;
  std::vector<TinyBlock> block_list;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::Tensor head_weight;  // the same tensor as wte->weight
};
TORCH_MODULE(TinyTransformer);

// Mean cross-entropy of next-token prediction: logits [b, s, v], targets [b, s].
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace fsdpp::models
