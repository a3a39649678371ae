#include "core/models/gpt2.h"

#include "core/models/attention.h"
#include "core/models/hf_json.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

namespace {

// GPT2Config's keys (transformers 5) and those of the Hub's 4.x files (openai-community/gpt2).
const KeyTable& gpt2_keys() {
  static const KeyTable keys = {
      {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "layer_norm_epsilon",
       "activation_function"},
      {{"resid_pdrop", "training-time dropout; fsdpp trains without dropout (docs/training.md)"},
       {"embd_pdrop", "training-time dropout; fsdpp trains without dropout (docs/training.md)"},
       {"attn_pdrop", "training-time dropout; fsdpp trains without dropout (docs/training.md)"},
       {"summary_type", "the sequence-summary head of GPT2DoubleHeadsModel only"},
       {"summary_use_proj", "the sequence-summary head of GPT2DoubleHeadsModel only"},
       {"summary_activation", "the sequence-summary head of GPT2DoubleHeadsModel only"},
       {"summary_proj_to_labels", "the sequence-summary head of GPT2DoubleHeadsModel only"},
       {"summary_first_dropout", "the sequence-summary head of GPT2DoubleHeadsModel only"},
       {"reorder_and_upcast_attn", "the same scores, computed in fp32 (only the rounding of a bf16/fp16 run moves)"},
       {"n_ctx", "the Hub's older name for n_positions' context; transformers 5 reads n_positions"},
       {"task_specific_params", "generation settings of the Hub's file, not the forward pass"},
       {"pad_token_id", "a tokenizer id: GPT-2's wte has no padding_idx"}},
      {{"scale_attn_weights", true},
       {"scale_attn_by_inverse_layer_idx", false},
       {"add_cross_attention", false},
       {"tie_word_embeddings", true}}};
  return keys;
}

}  // namespace

Gpt2Config Gpt2Config::from_json(const nlohmann::json& json, const std::string& source) {
  JsonReader r{json, source};
  refuse_unknown_keys(json, source, "gpt2", gpt2_keys());
  Gpt2Config c;
  c.vocab_size = r.integer("vocab_size");
  c.n_positions = r.integer("n_positions", 1024);
  c.n_embd = r.integer("n_embd");
  c.n_layer = r.integer("n_layer");
  c.n_head = r.integer("n_head");
  c.n_inner = r.integer("n_inner", 0);
  c.layer_norm_epsilon = r.number("layer_norm_epsilon", 1e-5);
  auto activation = r.text("activation_function", "gelu_new");
  if (activation != "gelu_new")
    throw std::invalid_argument(source + ": activation_function '" + activation + "' is not supported (gelu_new)");
  if (c.n_head < 1)
    throw std::invalid_argument(source + ": n_head is " + std::to_string(c.n_head) + ", expected at least 1");
  if (c.n_embd % c.n_head != 0)
    throw std::invalid_argument(source + ": n_embd " + std::to_string(c.n_embd) + " is not a multiple of n_head " +
                                std::to_string(c.n_head));
  return c;
}

nlohmann::json Gpt2Config::to_json() const {
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"vocab_size", vocab_size},
          {"n_positions", n_positions},
          {"n_ctx", n_positions},
          {"n_embd", n_embd},
          {"n_layer", n_layer},
          {"n_head", n_head},
          {"n_inner", n_inner > 0 ? nlohmann::json(n_inner) : nlohmann::json(nullptr)},
          {"layer_norm_epsilon", layer_norm_epsilon},
          {"activation_function", "gelu_new"},
          {"tie_word_embeddings", true}};
}

Gpt2AttentionImpl::Gpt2AttentionImpl(const Gpt2Config& c) : heads(c.n_head) {
  c_attn = register_module("c_attn", Conv1D(c.n_embd, 3 * c.n_embd));
  c_proj = register_module("c_proj", Conv1D(c.n_embd, c.n_embd));
}

torch::Tensor Gpt2AttentionImpl::forward(const torch::Tensor& x) {
  auto qkv = nn::call(c_attn, x).split(x.size(-1), -1);
  auto y = causal_attention(split_heads(qkv[0], heads), split_heads(qkv[1], heads), split_heads(qkv[2], heads));
  return nn::call(c_proj, merge_heads(y));
}

Gpt2MlpImpl::Gpt2MlpImpl(const Gpt2Config& c) {
  c_fc = register_module("c_fc", Conv1D(c.n_embd, c.inner()));
  c_proj = register_module("c_proj", Conv1D(c.inner(), c.n_embd));
}

// The block only adds the MLP's output to the residual stream and returns the sum: the
// projection's value is summed, never saved (nn::call_summed).
torch::Tensor Gpt2MlpImpl::forward(const torch::Tensor& x) {
  return nn::call_summed(c_proj, torch::gelu(nn::call(c_fc, x), "tanh"));  // gelu_new
}

Gpt2BlockImpl::Gpt2BlockImpl(const Gpt2Config& c) {
  auto ln = [&] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_epsilon)); };
  ln_1 = register_module("ln_1", ln());
  attn = register_module("attn", Gpt2Attention(c));
  ln_2 = register_module("ln_2", ln());
  mlp = register_module("mlp", Gpt2Mlp(c));
}

torch::Tensor Gpt2BlockImpl::forward(torch::Tensor x) {
  x = x + nn::call(attn, nn::call(ln_1, x));
  return x + nn::call(mlp, nn::call(ln_2, x));
}

// Each part goes to the meta device as soon as it is built under nn::DeferredInit.
Gpt2ModelImpl::Gpt2ModelImpl(const Gpt2Config& c) {
  wte = register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd));
  nn::release_to_meta(*wte);
  wpe = register_module("wpe", torch::nn::Embedding(c.n_positions, c.n_embd));
  nn::release_to_meta(*wpe);
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    blocks.emplace_back(c);
    h->push_back(blocks.back());
    nn::release_to_meta(*blocks.back());
  }
  ln_f =
      register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd}).eps(c.layer_norm_epsilon)));
  nn::release_to_meta(*ln_f);
}

torch::Tensor Gpt2ModelImpl::forward(const torch::Tensor& tokens) {
  auto positions = torch::arange(tokens.size(1), tokens.options().dtype(torch::kLong));
  auto x = nn::call(wte, tokens) + nn::call(wpe, positions);
  for (auto& block : blocks) x = nn::call(block, x);
  return nn::call(ln_f, x);
}

Gpt2LMHeadModelImpl::Gpt2LMHeadModelImpl(const Gpt2Config& c) : config(c) {
  transformer = register_module("transformer", Gpt2Model(c));
  // Tied: the embedding's tensor, already meta when deferred.
  lm_head = register_module("lm_head", LmHead(transformer->wte->weight));
}

torch::Tensor Gpt2LMHeadModelImpl::forward(const torch::Tensor& tokens) {
  return nn::call(lm_head, nn::call(transformer, tokens));
}

}  // namespace fsdpp::models
