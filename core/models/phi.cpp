#include "core/models/phi.h"

#include <utility>

#include "core/models/attention.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

namespace {

torch::nn::Linear biased_linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(true));
}

torch::nn::LayerNorm layer_norm(int64_t dim, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps));
}

}  // namespace

PhiAttentionImpl::PhiAttentionImpl(const LlamaConfig& c, std::shared_ptr<RotaryTable> rotary_)
    : heads(c.num_attention_heads),
      kv_heads(c.num_key_value_heads),
      head_dim(c.dim_per_head()),
      rotary(std::move(rotary_)) {
  q_proj = register_module("q_proj", biased_linear(c.hidden_size, heads * head_dim));
  k_proj = register_module("k_proj", biased_linear(c.hidden_size, kv_heads * head_dim));
  v_proj = register_module("v_proj", biased_linear(c.hidden_size, kv_heads * head_dim));
  dense = register_module("dense", biased_linear(heads * head_dim, c.hidden_size));
  if (c.qk_norm) {
    q_layernorm = register_module("q_layernorm", layer_norm(head_dim, c.rms_norm_eps));
    k_layernorm = register_module("k_layernorm", layer_norm(head_dim, c.rms_norm_eps));
  }
}

torch::Tensor PhiAttentionImpl::forward(const torch::Tensor& x) {
  auto q = split_heads(nn::call(q_proj, x), heads);
  auto k = split_heads(nn::call(k_proj, x), kv_heads);
  auto v = split_heads(nn::call(v_proj, x), kv_heads);
  if (q_layernorm) {  // [b, heads, s, head_dim]: every head normalised on its own, before rope
    q = nn::call(q_layernorm, q);
    k = nn::call(k_layernorm, k);
  }
  auto [cos, sin] = rotary->cos_sin(x.size(1), x.device(), q.scalar_type());
  q = apply_rotary(q, cos, sin);
  k = apply_rotary(k, cos, sin);
  if (kv_heads != heads) {
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  }
  return nn::call(dense, merge_heads(causal_attention(q, k, v)));
}

PhiMlpImpl::PhiMlpImpl(const LlamaConfig& c) {
  fc1 = register_module("fc1", biased_linear(c.hidden_size, c.intermediate_size));
  fc2 = register_module("fc2", biased_linear(c.intermediate_size, c.hidden_size));
}

torch::Tensor PhiMlpImpl::forward(const torch::Tensor& x) {
  return nn::call_summed(fc2, torch::gelu(nn::call(fc1, x), "tanh"));  // gelu_new
}

PhiDecoderLayerImpl::PhiDecoderLayerImpl(const LlamaConfig& c, std::shared_ptr<RotaryTable> rotary) {
  input_layernorm = register_module("input_layernorm", layer_norm(c.hidden_size, c.rms_norm_eps));
  self_attn = register_module("self_attn", PhiAttention(c, std::move(rotary)));
  mlp = register_module("mlp", PhiMlp(c));
}

torch::Tensor PhiDecoderLayerImpl::forward(torch::Tensor x) {
  const auto h = nn::call(input_layernorm, x);
  auto attention = nn::call(self_attn, h);
  return attention + nn::call(mlp, h) + x;  // PhiDecoderLayer's order of addition
}

// Each part goes to the meta device as soon as it is built under nn::DeferredInit.
PhiModelImpl::PhiModelImpl(const LlamaConfig& c) : rotary(std::make_shared<RotaryTable>(rope_inverse_frequencies(c))) {
  auto embedding = torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size);
  if (c.pad_token_id >= 0) embedding.padding_idx(c.pad_token_id);
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(embedding));
  nn::release_to_meta(*embed_tokens);
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layer_list.emplace_back(c, rotary);
    layers->push_back(layer_list.back());
    nn::release_to_meta(*layer_list.back());
  }
  final_layernorm = register_module("final_layernorm", layer_norm(c.hidden_size, c.rms_norm_eps));
  nn::release_to_meta(*final_layernorm);
}

torch::Tensor PhiModelImpl::forward(const torch::Tensor& tokens) {
  auto x = nn::call(embed_tokens, tokens);
  for (auto& layer : layer_list) x = nn::call(layer, x);
  return nn::call(final_layernorm, x);
}

PhiForCausalLMImpl::PhiForCausalLMImpl(const LlamaConfig& c) : config(c) {
  model = register_module("model", PhiModel(c));
  lm_head = register_module("lm_head", biased_linear(c.hidden_size, c.vocab_size));
  nn::release_to_meta(*lm_head);
}

torch::Tensor PhiForCausalLMImpl::forward(const torch::Tensor& tokens) {
  return nn::call(lm_head, nn::call(model, tokens));
}

}  // namespace fsdpp::models
