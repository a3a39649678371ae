#include "core/models/tiny_transformer.h"

#include <cmath>

#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

TinyBlockImpl::TinyBlockImpl(const TinyTransformerConfig& c) : heads(c.heads) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
  // No bias on q/k/v: a key bias shifts every score of a row equally, so softmax makes
  // its true gradient exactly zero, and Adam would turn the rounding noise left in it
  // into full-size updates that no two correct implementations share.
  qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(c.dim, 3 * c.dim).bias(false)));
  proj = register_module("proj", torch::nn::Linear(c.dim, c.dim));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
  fc = register_module("fc", torch::nn::Linear(c.dim, 4 * c.dim));
  fc_proj = register_module("fc_proj", torch::nn::Linear(4 * c.dim, c.dim));
}

torch::Tensor TinyBlockImpl::forward(torch::Tensor x) {
  auto b = x.size(0), s = x.size(1), d = x.size(2), hd = d / heads;
  auto parts = nn::call(qkv, nn::call(ln1, x)).view({b, s, 3, heads, hd}).permute({2, 0, 3, 1, 4});  // [3, b, h, s, hd]
  auto q = parts[0], k = parts[1], v = parts[2];
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
  auto causal = torch::ones({s, s}, x.options().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
  auto attn = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({b, s, d});
  x = x + nn::call(proj, attn);
  auto h = nn::call(fc, nn::call(ln2, x));
  return x + nn::call_summed(fc_proj, torch::gelu(h, "tanh"));
}

// Each part goes to the meta device as soon as it is built under nn::DeferredInit.
TinyTransformerImpl::TinyTransformerImpl(const TinyTransformerConfig& c) : config(c) {
  wte = register_module("wte", torch::nn::Embedding(c.vocab, c.dim));
  nn::release_to_meta(*wte);
  wpe = register_module("wpe", torch::nn::Embedding(c.seq_len, c.dim));
  nn::release_to_meta(*wpe);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    block_list.emplace_back(c);
    blocks->push_back(block_list.back());
    nn::release_to_meta(*block_list.back());
  }
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
  nn::release_to_meta(*ln_f);
  // The tie is registered, not hidden in forward, so that anything walking the module
  // tree (a wrap policy, an optimizer) sees that the embedding weight is used twice.
  head_weight = register_parameter("head_weight", wte->weight);
}

torch::Tensor TinyTransformerImpl::forward(torch::Tensor tokens) {
  auto positions = torch::arange(tokens.size(1), tokens.options().dtype(torch::kLong));
  auto x = nn::call(wte, tokens) + nn::call(wpe, positions);
  for (auto& block : block_list) x = nn::call(block, x);
  return torch::matmul(nn::call(ln_f, x), head_weight.t());
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace fsdpp::models
