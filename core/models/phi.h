// Phi-1, Phi-1.5 and Phi-2 (transformers' PhiForCausalLM, model_type "phi"), read through
// LlamaConfig (its keys, rope and refusals): one LayerNorm feeds attention and the MLP in
// parallel, x + attention(ln x) + mlp(ln x); q/k/v and the output projection `dense` are
// biased; rope turns the first partial_rotary_factor of each head; qk_layernorm adds a
// LayerNorm over each query and key head (over hidden / heads) before rope; the MLP is
// fc2(gelu_new(fc1 x)); `final_layernorm`, then a biased, untied lm_head.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "core/models/llama.h"
#include "core/models/rotary.h"

namespace fsdpp::models {

struct PhiAttentionImpl : torch::nn::Module {
  PhiAttentionImpl(const LlamaConfig& c, std::shared_ptr<RotaryTable> rotary);
  torch::Tensor forward(const torch::Tensor& x);
  int64_t heads, kv_heads, head_dim;
  std::shared_ptr<RotaryTable> rotary;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, dense{nullptr};
  torch::nn::LayerNorm q_layernorm{nullptr}, k_layernorm{nullptr};  // only with qk_layernorm
};
TORCH_MODULE(PhiAttention);

struct PhiMlpImpl : torch::nn::Module {
  explicit PhiMlpImpl(const LlamaConfig& c);
  // fc2(gelu_new(fc1 x)); fc2's value is only added to the residual stream (nn::call_summed).
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(PhiMlp);

struct PhiDecoderLayerImpl : torch::nn::Module {
  PhiDecoderLayerImpl(const LlamaConfig& c, std::shared_ptr<RotaryTable> rotary);
  torch::Tensor forward(torch::Tensor x);  // x + attention(ln x) + mlp(ln x), in that order of addition
  torch::nn::LayerNorm input_layernorm{nullptr};
  PhiAttention self_attn{nullptr};
  PhiMlp mlp{nullptr};
};
TORCH_MODULE(PhiDecoderLayer);

struct PhiModelImpl : torch::nn::Module {
  explicit PhiModelImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& tokens);  // -> final_layernorm's output
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  std::vector<PhiDecoderLayer> layer_list;
  torch::nn::LayerNorm final_layernorm{nullptr};
  std::shared_ptr<RotaryTable> rotary;
};
TORCH_MODULE(PhiModel);

struct PhiForCausalLMImpl : torch::nn::Module {
  explicit PhiForCausalLMImpl(const LlamaConfig& c);   // c.model_type "phi"
  torch::Tensor forward(const torch::Tensor& tokens);  // -> logits [b, s, vocab]
  LlamaConfig config;
  PhiModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};
};
TORCH_MODULE(PhiForCausalLM);

}  // namespace fsdpp::models
