// OPT with Hugging Face OPTForCausalLM semantics and tensor names: learned positions
// offset by 2, ReLU MLP, pre- or post-LayerNorm (do_layer_norm_before), project_in /
// project_out when word_embed_proj_dim differs from hidden_size (OPT-350M), LM head tied
// to the token embedding.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/models/layers.h"

namespace fsdpp::models {

struct OptConfig {
  int64_t vocab_size = 50272;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t ffn_dim = 3072;
  int64_t max_position_embeddings = 2048;
  int64_t word_embed_proj_dim = 768;
  bool do_layer_norm_before = true;
  bool enable_bias = true;
  bool remove_final_layer_norm = false;  // HF's _remove_final_layer_norm
  std::string activation_function = "relu";
  // The embedding's padding_idx (nn.Embedding's, as OPTDecoder builds it): that row gets no
  // gradient from its lookups. -1: none (a from-scratch preset); absent in a config.json:
  // OPTConfig's default, 1.
  int64_t pad_token_id = -1;

  static OptConfig from_json(const nlohmann::json& json, const std::string& source);
  nlohmann::json to_json() const;
};

struct OptAttentionImpl : torch::nn::Module {
  explicit OptAttentionImpl(const OptConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  int64_t heads;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};
};
TORCH_MODULE(OptAttention);

struct OptLayerImpl : torch::nn::Module {
  explicit OptLayerImpl(const OptConfig& c);
  torch::Tensor forward(torch::Tensor x);
  bool pre_norm;
  std::string activation;
  OptAttention self_attn{nullptr};
  torch::nn::LayerNorm self_attn_layer_norm{nullptr}, final_layer_norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(OptLayer);

struct OptDecoderImpl : torch::nn::Module {
  explicit OptDecoderImpl(const OptConfig& c);
  torch::Tensor forward(const torch::Tensor& tokens);  // -> hidden states [b, s, word_embed_proj_dim]
  torch::nn::Embedding embed_tokens{nullptr}, embed_positions{nullptr};
  torch::nn::Linear project_in{nullptr}, project_out{nullptr};  // null when not needed
  torch::nn::LayerNorm final_layer_norm{nullptr};               // null when not used
  torch::nn::ModuleList layers;
  std::vector<OptLayer> layer_list;
};
TORCH_MODULE(OptDecoder);

struct OptModelImpl : torch::nn::Module {
  explicit OptModelImpl(const OptConfig& c);
  torch::Tensor forward(const torch::Tensor& tokens);
  OptDecoder decoder{nullptr};
};
TORCH_MODULE(OptModel);

struct OptForCausalLMImpl : torch::nn::Module {
  explicit OptForCausalLMImpl(const OptConfig& c);
  torch::Tensor forward(const torch::Tensor& tokens);  // -> logits [b, s, vocab]
  OptConfig config;
  OptModel model{nullptr};
  LmHead lm_head{nullptr};
};
TORCH_MODULE(OptForCausalLM);

}  // namespace fsdpp::models
