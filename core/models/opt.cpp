#include "core/models/opt.h"

#include <cmath>

#include "core/models/attention.h"
#include "core/models/hf_json.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

namespace {
constexpr int64_t kPositionOffset = 2;  // OPTLearnedPositionalEmbedding's offset
}

namespace {

// OPTConfig's keys (transformers 5) and those of the Hub's 4.x files (facebook/opt-*).
const KeyTable& opt_keys() {
  static const KeyTable keys = {
      {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "ffn_dim", "max_position_embeddings",
       "word_embed_proj_dim", "do_layer_norm_before", "enable_bias", "_remove_final_layer_norm", "activation_function",
       "pad_token_id"},
      {{"dropout", "training-time dropout; fsdpp trains without dropout (docs/training.md)"},
       {"attention_dropout", "training-time dropout; fsdpp trains without dropout (docs/training.md)"},
       {"activation_dropout", "training-time dropout; fsdpp trains without dropout (docs/training.md)"},
       {"layerdrop", "training-time layer dropout; fsdpp trains without it (docs/training.md)"},
       {"init_std", "random initialisation only; fsdpp's from-scratch init is its own"},
       {"prefix", "a tokenizer prefix of the Hub's files, not part of the forward pass"}},
      {{"layer_norm_elementwise_affine", true}, {"tie_word_embeddings", true}}};
  return keys;
}

}  // namespace

OptConfig OptConfig::from_json(const nlohmann::json& json, const std::string& source) {
  JsonReader r{json, source};
  refuse_unknown_keys(json, source, "opt", opt_keys());
  OptConfig c;
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  c.ffn_dim = r.integer("ffn_dim");
  c.max_position_embeddings = r.integer("max_position_embeddings");
  c.word_embed_proj_dim = r.integer("word_embed_proj_dim", c.hidden_size);
  c.do_layer_norm_before = r.boolean("do_layer_norm_before", true);
  c.enable_bias = r.boolean("enable_bias", true);
  c.remove_final_layer_norm = r.boolean("_remove_final_layer_norm", false);
  c.activation_function = r.text("activation_function", "relu");
  // Absent: OPTConfig's default; null: no padding row.
  const bool pad_null = json.contains("pad_token_id") && json["pad_token_id"].is_null();
  c.pad_token_id = pad_null ? -1 : r.integer("pad_token_id", 1);
  if (c.pad_token_id >= c.vocab_size || c.pad_token_id < -1)
    throw std::invalid_argument(source + ": key 'pad_token_id' is " + std::to_string(c.pad_token_id) +
                                ", expected a token id below vocab_size " + std::to_string(c.vocab_size));
  if (c.activation_function != "relu" && c.activation_function != "gelu")
    throw std::invalid_argument(source + ": activation_function '" + c.activation_function +
                                "' is not supported (relu or gelu)");
  if (c.num_attention_heads < 1)
    throw std::invalid_argument(source + ": num_attention_heads is " + std::to_string(c.num_attention_heads) +
                                ", expected at least 1");
  if (c.hidden_size % c.num_attention_heads != 0)
    throw std::invalid_argument(source + ": hidden_size is not a multiple of num_attention_heads");
  return c;
}

nlohmann::json OptConfig::to_json() const {
  return {{"model_type", "opt"},
          {"architectures", {"OPTForCausalLM"}},
          {"vocab_size", vocab_size},
          {"hidden_size", hidden_size},
          {"num_hidden_layers", num_hidden_layers},
          {"num_attention_heads", num_attention_heads},
          {"ffn_dim", ffn_dim},
          {"max_position_embeddings", max_position_embeddings},
          {"word_embed_proj_dim", word_embed_proj_dim},
          {"do_layer_norm_before", do_layer_norm_before},
          {"enable_bias", enable_bias},
          {"_remove_final_layer_norm", remove_final_layer_norm},
          {"activation_function", activation_function},
          {"pad_token_id", pad_token_id >= 0 ? nlohmann::json(pad_token_id) : nlohmann::json(nullptr)},
          {"tie_word_embeddings", true}};
}

OptAttentionImpl::OptAttentionImpl(const OptConfig& c) : heads(c.num_attention_heads) {
  auto linear = [&](const char* name) {
    return register_module(
        name, torch::nn::Linear(torch::nn::LinearOptions(c.hidden_size, c.hidden_size).bias(c.enable_bias)));
  };
  q_proj = linear("q_proj");
  k_proj = linear("k_proj");
  v_proj = linear("v_proj");
  out_proj = linear("out_proj");
}

torch::Tensor OptAttentionImpl::forward(const torch::Tensor& x) {
  // HF scales the query projection (bias included) by head_dim^-0.5, then no scale.
  const int64_t head_dim = x.size(-1) / heads;
  double scaling = 1.0 / std::sqrt(static_cast<double>(head_dim));
  auto q = split_heads(nn::call(q_proj, x) * scaling, heads);
  auto k = split_heads(nn::call(k_proj, x), heads), v = split_heads(nn::call(v_proj, x), heads);
  return nn::call(out_proj, merge_heads(causal_attention(q, k, v, /*scale=*/1.0)));
}

OptLayerImpl::OptLayerImpl(const OptConfig& c) : pre_norm(c.do_layer_norm_before), activation(c.activation_function) {
  self_attn = register_module("self_attn", OptAttention(c));
  self_attn_layer_norm =
      register_module("self_attn_layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size})));
  fc1 =
      register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(c.hidden_size, c.ffn_dim).bias(c.enable_bias)));
  fc2 =
      register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(c.ffn_dim, c.hidden_size).bias(c.enable_bias)));
  final_layer_norm =
      register_module("final_layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size})));
}

torch::Tensor OptLayerImpl::forward(torch::Tensor x) {
  auto h = pre_norm ? nn::call(self_attn_layer_norm, x) : x;
  x = x + nn::call(self_attn, h);
  if (!pre_norm) x = nn::call(self_attn_layer_norm, x);
  h = pre_norm ? nn::call(final_layer_norm, x) : x;
  h = nn::call(fc1, h);
  h = activation == "relu" ? torch::relu(h) : torch::gelu(h);
  x = x + nn::call_summed(fc2, h);  // post-norm: the norm's call after it makes it not the last
  if (!pre_norm) x = nn::call(final_layer_norm, x);
  return x;
}

// Each part goes to the meta device as soon as it is built under nn::DeferredInit.
OptDecoderImpl::OptDecoderImpl(const OptConfig& c) {
  auto embedding = torch::nn::EmbeddingOptions(c.vocab_size, c.word_embed_proj_dim);
  if (c.pad_token_id >= 0) embedding.padding_idx(c.pad_token_id);  // that row gets no gradient, as in HF
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(embedding));
  nn::release_to_meta(*embed_tokens);
  embed_positions = register_module("embed_positions",
                                    torch::nn::Embedding(c.max_position_embeddings + kPositionOffset, c.hidden_size));
  nn::release_to_meta(*embed_positions);
  if (c.word_embed_proj_dim != c.hidden_size) {
    project_out = register_module(
        "project_out", torch::nn::Linear(torch::nn::LinearOptions(c.hidden_size, c.word_embed_proj_dim).bias(false)));
    nn::release_to_meta(*project_out);
    project_in = register_module(
        "project_in", torch::nn::Linear(torch::nn::LinearOptions(c.word_embed_proj_dim, c.hidden_size).bias(false)));
    nn::release_to_meta(*project_in);
  }
  if (c.do_layer_norm_before && !c.remove_final_layer_norm) {
    final_layer_norm =
        register_module("final_layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size})));
    nn::release_to_meta(*final_layer_norm);
  }
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layer_list.emplace_back(c);
    layers->push_back(layer_list.back());
    nn::release_to_meta(*layer_list.back());
  }
}

torch::Tensor OptDecoderImpl::forward(const torch::Tensor& tokens) {
  // Without padding, HF's positions are cumsum(mask) - 1 = 0..s-1, looked up at +2.
  auto positions = torch::arange(tokens.size(1), tokens.options().dtype(torch::kLong)) + kPositionOffset;
  auto x = nn::call(embed_tokens, tokens);
  if (project_in) x = nn::call(project_in, x);
  x = x + nn::call(embed_positions, positions);
  for (auto& layer : layer_list) x = nn::call(layer, x);
  if (final_layer_norm) x = nn::call(final_layer_norm, x);
  if (project_out) x = nn::call(project_out, x);
  return x;
}

OptModelImpl::OptModelImpl(const OptConfig& c) { decoder = register_module("decoder", OptDecoder(c)); }

torch::Tensor OptModelImpl::forward(const torch::Tensor& tokens) { return nn::call(decoder, tokens); }

OptForCausalLMImpl::OptForCausalLMImpl(const OptConfig& c) : config(c) {
  model = register_module("model", OptModel(c));
  // Tied: the embedding's tensor, already meta when deferred.
  lm_head = register_module("lm_head", LmHead(model->decoder->embed_tokens->weight));
}

torch::Tensor OptForCausalLMImpl::forward(const torch::Tensor& tokens) {
  return nn::call(lm_head, nn::call(model, tokens));
}

}  // namespace fsdpp::models
