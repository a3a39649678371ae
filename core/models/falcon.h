// Falcon (transformers' FalconForCausalLM, model_type "falcon"): Falcon-7B's multi-query
// attention (one key/value head) with attention and MLP in parallel from one LayerNorm,
// Falcon-40B/180B's "new decoder architecture" (num_kv_heads groups, each fused as
// [its queries | key | value], and a LayerNorm each for attention and MLP, or one with
// num_ln_in_parallel_attn 1), and the sequential block of parallel_attn false. One fused
// query_key_value projection and `dense` per attention, MLP dense_4h_to_h(act(dense_h_to_4h
// x)) with act gelu (exact) or relu, optional biases (`bias`), rotary embeddings over the
// whole head, ln_f, a head tied to word_embeddings by default. ALiBi is refused.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "core/models/layers.h"
#include "core/models/llama.h"
#include "core/models/rotary.h"

namespace fsdpp::models {

struct FalconConfig {
  int64_t vocab_size = 65024;
  int64_t hidden_size = 4544;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 71;
  int64_t num_kv_heads = 71;    // new_decoder_architecture only; else 1 (multi_query) or every head
  int64_t ffn_hidden_size = 0;  // 0: 4 * hidden_size
  int64_t max_position_embeddings = 2048;
  double layer_norm_epsilon = 1e-5;
  bool new_decoder_architecture = false;
  bool multi_query = true;
  bool parallel_attn = true;
  int64_t num_ln_in_parallel_attn = 1;  // new_decoder_architecture: 2 (ln_attn, ln_mlp) or 1
  bool bias = false;
  std::string activation = "gelu";  // gelu (erf) or relu
  bool tie_word_embeddings = true;
  LlamaConfig rope;  // the rotary settings (rope_theta, scaling), read by Llama's rope reader

  // Every key transformers writes for Falcon (4.x and 5.x layouts) is computed, listed as
  // not changing the math, or refused in one line naming `source`, the key and its value.
  static FalconConfig from_json(const nlohmann::json& json, const std::string& source);
  nlohmann::json to_json() const;
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  // Key/value heads the attention computes: num_kv_heads, 1 (multi_query) or every head.
  int64_t kv_heads() const;
  int64_t parameter_count() const;  // exact, a tied head once
};

struct FalconAttentionImpl : torch::nn::Module {
  FalconAttentionImpl(const FalconConfig& c, std::shared_ptr<RotaryTable> rotary);
  torch::Tensor forward(const torch::Tensor& x);
  FalconConfig config;
  std::shared_ptr<RotaryTable> rotary;
  torch::nn::Linear query_key_value{nullptr}, dense{nullptr};
};
TORCH_MODULE(FalconAttention);

struct FalconMlpImpl : torch::nn::Module {
  explicit FalconMlpImpl(const FalconConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // its value is only added to the residual stream
  bool relu;
  torch::nn::Linear dense_h_to_4h{nullptr}, dense_4h_to_h{nullptr};
};
TORCH_MODULE(FalconMlp);

struct FalconDecoderLayerImpl : torch::nn::Module {
  FalconDecoderLayerImpl(const FalconConfig& c, std::shared_ptr<RotaryTable> rotary);
  torch::Tensor forward(torch::Tensor x);
  bool parallel;
  // input_layernorm (and post_attention_layernorm when sequential), or ln_attn and ln_mlp.
  torch::nn::LayerNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  torch::nn::LayerNorm ln_attn{nullptr}, ln_mlp{nullptr};
  FalconAttention self_attention{nullptr};
  FalconMlp mlp{nullptr};
};
TORCH_MODULE(FalconDecoderLayer);

struct FalconModelImpl : torch::nn::Module {
  explicit FalconModelImpl(const FalconConfig& c);
  torch::Tensor forward(const torch::Tensor& tokens);  // -> ln_f's output
  torch::nn::Embedding word_embeddings{nullptr};
  torch::nn::ModuleList h;
  std::vector<FalconDecoderLayer> layer_list;
  torch::nn::LayerNorm ln_f{nullptr};
  std::shared_ptr<RotaryTable> rotary;
};
TORCH_MODULE(FalconModel);

struct FalconForCausalLMImpl : torch::nn::Module {
  explicit FalconForCausalLMImpl(const FalconConfig& c);
  torch::Tensor forward(const torch::Tensor& tokens);  // -> logits [b, s, vocab]
  FalconConfig config;
  FalconModel transformer{nullptr};
  LmHead lm_head{nullptr};
};
TORCH_MODULE(FalconForCausalLM);

}  // namespace fsdpp::models
