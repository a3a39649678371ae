// GPT-2 with Hugging Face GPT2LMHeadModel semantics and tensor names: learned positions,
// pre-LayerNorm blocks, gelu_new (tanh approximation), Conv1D weights stored [in, out],
// LM head tied to the token embedding (lm_head.weight is transformer.wte.weight).
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/models/layers.h"

namespace fsdpp::models {

struct Gpt2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;

  // From a config.json object; `source` names it in errors.
  static Gpt2Config from_json(const nlohmann::json& json, const std::string& source);
  nlohmann::json to_json() const;
  int64_t inner() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
};

struct Gpt2AttentionImpl : torch::nn::Module {
  explicit Gpt2AttentionImpl(const Gpt2Config& c);
  torch::Tensor forward(const torch::Tensor& x);
  int64_t heads;
  Conv1D c_attn{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Gpt2Attention);

struct Gpt2MlpImpl : torch::nn::Module {
  explicit Gpt2MlpImpl(const Gpt2Config& c);
  torch::Tensor forward(const torch::Tensor& x);
  Conv1D c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Gpt2Mlp);

struct Gpt2BlockImpl : torch::nn::Module {
  explicit Gpt2BlockImpl(const Gpt2Config& c);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  Gpt2Attention attn{nullptr};
  Gpt2Mlp mlp{nullptr};
};
TORCH_MODULE(Gpt2Block);

struct Gpt2ModelImpl : torch::nn::Module {
  explicit Gpt2ModelImpl(const Gpt2Config& c);
  torch::Tensor forward(const torch::Tensor& tokens);  // -> final hidden states [b, s, d]
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h;
  std::vector<Gpt2Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt2Model);

struct Gpt2LMHeadModelImpl : torch::nn::Module {
  explicit Gpt2LMHeadModelImpl(const Gpt2Config& c);
  torch::Tensor forward(const torch::Tensor& tokens);  // [b, s] int64 -> logits [b, s, vocab]
  Gpt2Config config;
  Gpt2Model transformer{nullptr};
  LmHead lm_head{nullptr};
};
TORCH_MODULE(Gpt2LMHeadModel);

}  // namespace fsdpp::models
