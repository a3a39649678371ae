#include "core/models/falcon.h"

#include <stdexcept>
#include <utility>

#include "core/models/attention.h"
#include "core/models/hf_json.h"
#include "core/models/rope_config.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

namespace {

// FalconConfig's keys (transformers 5) and the 4.x Hub files'.
const KeyTable& falcon_keys() {
  static const KeyTable keys = {{"vocab_size",
                                 "hidden_size",
                                 "n_embed",
                                 "num_hidden_layers",
                                 "num_attention_heads",
                                 "num_kv_heads",
                                 "ffn_hidden_size",
                                 "max_position_embeddings",
                                 "layer_norm_epsilon",
                                 "new_decoder_architecture",
                                 "multi_query",
                                 "parallel_attn",
                                 "num_ln_in_parallel_attn",
                                 "bias",
                                 "activation",
                                 "tie_word_embeddings",
                                 "alibi",
                                 "hidden_dropout",
                                 "attention_dropout",
                                 "rope_parameters",
                                 "rope_theta",
                                 "rope_scaling",
                                 "apply_residual_connection_post_layernorm"},
                                {{"pad_token_id", "a tokenizer id: Falcon's word_embeddings has no padding_idx"}},
                                {}};
  return keys;
}

void refuse(const nlohmann::json& json, const std::string& source, const std::string& key, const std::string& why) {
  auto text = json[key].dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  throw std::invalid_argument(source + ": key '" + key + "' is " + text + "; " + why);
}

torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

torch::nn::LayerNorm layer_norm(const FalconConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_epsilon));
}

}  // namespace

// Defaults are FalconConfig's (Falcon-7B's shape).
FalconConfig FalconConfig::from_json(const nlohmann::json& json, const std::string& source) {
  JsonReader r{json, source};
  refuse_unknown_keys(json, source, "falcon", falcon_keys());
  FalconConfig c;
  c.vocab_size = r.integer("vocab_size", c.vocab_size);
  c.hidden_size = r.integer("n_embed", r.integer("hidden_size", c.hidden_size));  // FalconConfig: n_embed wins
  c.num_hidden_layers = r.integer("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.integer("num_attention_heads", c.num_attention_heads);
  c.num_kv_heads = r.integer("num_kv_heads", c.num_attention_heads);
  c.ffn_hidden_size = r.integer("ffn_hidden_size", 0);
  c.max_position_embeddings = r.integer("max_position_embeddings", c.max_position_embeddings);
  c.layer_norm_epsilon = r.number("layer_norm_epsilon", c.layer_norm_epsilon);
  c.new_decoder_architecture = r.boolean("new_decoder_architecture", false);
  c.multi_query = r.boolean("multi_query", true);
  c.parallel_attn = r.boolean("parallel_attn", true);
  c.num_ln_in_parallel_attn = r.integer("num_ln_in_parallel_attn", c.new_decoder_architecture ? 2 : 1);
  c.bias = r.boolean("bias", false);
  c.activation = r.text("activation", "gelu");
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  if (c.num_attention_heads < 1 || c.hidden_size % c.num_attention_heads != 0)
    throw std::invalid_argument(source + ": hidden_size " + std::to_string(c.hidden_size) +
                                " is not a multiple of num_attention_heads " + std::to_string(c.num_attention_heads));
  if (r.boolean("alibi", false)) refuse(json, source, "alibi", "ALiBi is not implemented (expected false)");
  for (const char* key : {"hidden_dropout", "attention_dropout"})
    if (r.number(key, 0.0) != 0.0) refuse(json, source, key, "dropout is not implemented (expected 0)");
  if (r.boolean("apply_residual_connection_post_layernorm", false))
    refuse(json, source, "apply_residual_connection_post_layernorm",
           "transformers' Falcon never computes it; fsdpp refuses rather than ignore it (expected false)");
  if (c.activation != "gelu" && c.activation != "relu")
    refuse(json, source, "activation", "fsdpp's Falcon computes gelu and relu only");
  if (c.new_decoder_architecture) {
    // FalconDecoderLayer builds ln_attn/ln_mlp or input_layernorm for the parallel block only.
    if (!c.parallel_attn)
      refuse(json, source, "parallel_attn", "the new decoder architecture runs attention and MLP in parallel");
    if (c.num_ln_in_parallel_attn != 1 && c.num_ln_in_parallel_attn != 2)
      refuse(json, source, "num_ln_in_parallel_attn", "expected 1 or 2");
    if (c.num_kv_heads < 1 || c.num_attention_heads % c.num_kv_heads != 0)
      refuse(json, source, "num_kv_heads", "expected a divisor of num_attention_heads");
  } else if (!c.multi_query && c.num_kv_heads != c.num_attention_heads) {
    refuse(json, source, "num_kv_heads", "without multi_query the old architecture has one per head");
  }
  c.rope.model_type = "falcon";
  c.rope.hidden_size = c.hidden_size;
  c.rope.num_attention_heads = c.num_attention_heads;
  c.rope.rope_theta = 10000.0;
  read_rope_settings(json, source, c.rope);
  return c;
}

int64_t FalconConfig::kv_heads() const {
  if (new_decoder_architecture) return num_kv_heads;
  return multi_query ? 1 : num_attention_heads;
}

nlohmann::json FalconConfig::to_json() const {
  nlohmann::json j = {{"model_type", "falcon"},
                      {"architectures", {"FalconForCausalLM"}},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"num_kv_heads", num_kv_heads},
                      {"ffn_hidden_size", ffn()},
                      {"max_position_embeddings", max_position_embeddings},
                      {"layer_norm_epsilon", layer_norm_epsilon},
                      {"new_decoder_architecture", new_decoder_architecture},
                      {"multi_query", multi_query},
                      {"parallel_attn", parallel_attn},
                      {"num_ln_in_parallel_attn",
                       new_decoder_architecture ? nlohmann::json(num_ln_in_parallel_attn) : nlohmann::json(nullptr)},
                      {"bias", bias},
                      {"activation", activation},
                      {"tie_word_embeddings", tie_word_embeddings},
                      {"alibi", false},
                      {"hidden_dropout", 0.0},
                      {"attention_dropout", 0.0},
                      {"rope_theta", rope.rope_theta},
                      {"rope_scaling", nullptr}};
  if (rope.rope_linear_factor != 1.0)
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope.rope_linear_factor}};
  if (rope.rope_scaling)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope.rope_scaling->factor},
                         {"low_freq_factor", rope.rope_scaling->low_freq_factor},
                         {"high_freq_factor", rope.rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings", rope.rope_scaling->original_max_position_embeddings}};
  return j;
}

int64_t FalconConfig::parameter_count() const {
  const int64_t d = hidden_size, hd = head_dim();
  const int64_t qkv = (num_attention_heads + 2 * kv_heads()) * hd;
  const int64_t attention = d * qkv + d * d + (bias ? qkv + d : 0);
  const int64_t mlp = 2 * d * ffn() + (bias ? ffn() + d : 0);
  const int64_t norms = (new_decoder_architecture ? num_ln_in_parallel_attn : parallel_attn ? 1 : 2) * 2 * d;
  return num_hidden_layers * (attention + mlp + norms) + vocab_size * d * (tie_word_embeddings ? 1 : 2) + 2 * d;
}

FalconAttentionImpl::FalconAttentionImpl(const FalconConfig& c, std::shared_ptr<RotaryTable> rotary_)
    : config(c), rotary(std::move(rotary_)) {
  const int64_t hd = c.head_dim();
  query_key_value = register_module("query_key_value",
                                    linear(c.hidden_size, (c.num_attention_heads + 2 * c.kv_heads()) * hd, c.bias));
  dense = register_module("dense", linear(c.hidden_size, c.hidden_size, c.bias));
}

// FalconAttention._split_heads: the new architecture fuses each key/value group as
// [its heads / groups queries | key | value]; multi-query as [every query | key | value];
// the old one head by head as [query | key | value].
torch::Tensor FalconAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0), s = x.size(1), heads = config.num_attention_heads, hd = config.head_dim();
  const int64_t kv = config.kv_heads();
  const auto fused = nn::call(query_key_value, x);
  torch::Tensor q, k, v;  // [b, s, heads or kv, hd]
  if (config.new_decoder_architecture) {
    const auto groups = fused.view({b, s, kv, heads / kv + 2, hd});
    q = groups.narrow(3, 0, heads / kv).reshape({b, s, heads, hd});
    k = groups.select(3, heads / kv);
    v = groups.select(3, heads / kv + 1);
  } else if (config.multi_query) {
    const auto all = fused.view({b, s, heads + 2, hd});
    q = all.narrow(2, 0, heads);
    k = all.narrow(2, heads, 1);
    v = all.narrow(2, heads + 1, 1);
  } else {
    const auto each = fused.view({b, s, heads, 3, hd});
    q = each.select(3, 0), k = each.select(3, 1), v = each.select(3, 2);
  }
  q = q.transpose(1, 2), k = k.transpose(1, 2), v = v.transpose(1, 2);  // [b, heads, s, hd]
  auto [cos, sin] = rotary->cos_sin(s, x.device(), q.scalar_type());
  q = apply_rotary(q, cos, sin);
  k = apply_rotary(k, cos, sin);
  if (kv != heads) {  // each key/value head serves its group of heads / kv consecutive queries
    k = k.repeat_interleave(heads / kv, 1);
    v = v.repeat_interleave(heads / kv, 1);
  }
  return nn::call(dense, merge_heads(causal_attention(q, k, v)));
}

FalconMlpImpl::FalconMlpImpl(const FalconConfig& c) : relu(c.activation == "relu") {
  dense_h_to_4h = register_module("dense_h_to_4h", linear(c.hidden_size, c.ffn(), c.bias));
  dense_4h_to_h = register_module("dense_4h_to_h", linear(c.ffn(), c.hidden_size, c.bias));
}

torch::Tensor FalconMlpImpl::forward(const torch::Tensor& x) {
  const auto h = nn::call(dense_h_to_4h, x);
  return nn::call_summed(dense_4h_to_h, relu ? torch::relu(h) : torch::gelu(h));
}

FalconDecoderLayerImpl::FalconDecoderLayerImpl(const FalconConfig& c, std::shared_ptr<RotaryTable> rotary)
    : parallel(c.new_decoder_architecture || c.parallel_attn) {
  if (c.new_decoder_architecture && c.num_ln_in_parallel_attn == 2) {
    ln_attn = register_module("ln_attn", layer_norm(c));
    ln_mlp = register_module("ln_mlp", layer_norm(c));
  } else {
    input_layernorm = register_module("input_layernorm", layer_norm(c));
    if (!parallel) post_attention_layernorm = register_module("post_attention_layernorm", layer_norm(c));
  }
  self_attention = register_module("self_attention", FalconAttention(c, std::move(rotary)));
  mlp = register_module("mlp", FalconMlp(c));
}

// FalconDecoderLayer.forward: parallel, (mlp(ln x) + attention(ln x)) + x; sequential,
// r = x + attention(ln x), then r + mlp(post_ln r).
torch::Tensor FalconDecoderLayerImpl::forward(torch::Tensor x) {
  const auto attention_in = ln_attn ? nn::call(ln_attn, x) : nn::call(input_layernorm, x);
  const auto attention = nn::call(self_attention, attention_in);
  if (!parallel) {
    const auto residual = x + attention;
    return nn::call(mlp, nn::call(post_attention_layernorm, residual)) + residual;
  }
  const auto mlp_in = ln_mlp ? nn::call(ln_mlp, x) : attention_in;
  return nn::call(mlp, mlp_in) + attention + x;
}

// Each part goes to the meta device as soon as it is built under nn::DeferredInit.
FalconModelImpl::FalconModelImpl(const FalconConfig& c)
    : rotary(std::make_shared<RotaryTable>(rope_inverse_frequencies(c.rope))) {
  word_embeddings = register_module("word_embeddings", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  nn::release_to_meta(*word_embeddings);
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layer_list.emplace_back(c, rotary);
    h->push_back(layer_list.back());
    nn::release_to_meta(*layer_list.back());
  }
  ln_f = register_module("ln_f", layer_norm(c));
  nn::release_to_meta(*ln_f);
}

torch::Tensor FalconModelImpl::forward(const torch::Tensor& tokens) {
  auto x = nn::call(word_embeddings, tokens);
  for (auto& layer : layer_list) x = nn::call(layer, x);
  return nn::call(ln_f, x);
}

FalconForCausalLMImpl::FalconForCausalLMImpl(const FalconConfig& c) : config(c) {
  transformer = register_module("transformer", FalconModel(c));
  lm_head = register_module("lm_head", c.tie_word_embeddings ? LmHead(transformer->word_embeddings->weight)
                                                             : LmHead(c.hidden_size, c.vocab_size));
  nn::release_to_meta(*lm_head);
}

torch::Tensor FalconForCausalLMImpl::forward(const torch::Tensor& tokens) {
  return nn::call(lm_head, nn::call(transformer, tokens));
}

}  // namespace fsdpp::models
