#include "core/models/llama.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "core/models/attention.h"
#include "core/models/hf_json.h"
#include "core/models/rope_config.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

namespace {

// One rope description: transformers 5's rope_parameters, or a legacy rope_scaling (whose
// theta is the top-level rope_theta). Only what fsdpp computes is accepted: rope_type
// "default" (or none) and "llama3"; any other type or key is refused in one line, never
// defaulted (a silently ignored setting evaluates to a slightly wrong model).
void read_rope_object(const nlohmann::json& rope, const std::string& where, bool legacy, LlamaConfig& c) {
  if (!rope.is_object()) throw std::invalid_argument(where + ": expected an object");
  JsonReader r{rope, where};
  const std::string type = r.text("rope_type", r.text("type", "default"));
  if (type != "default" && type != "llama3" && type != "linear")
    throw std::invalid_argument(where + ": rope_type '" + type + "' is not supported (default, linear, llama3)");
  for (const auto& item : rope.items()) {
    static const std::set<std::string> kCommon = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    static const std::set<std::string> kLlama3 = {"factor", "low_freq_factor", "high_freq_factor",
                                                  "original_max_position_embeddings"};
    if (kCommon.count(item.key()) || (type == "llama3" && kLlama3.count(item.key()))) continue;
    if (type == "linear" && item.key() == "factor") continue;
    throw std::invalid_argument(where + ": key '" + item.key() + "' is not understood for rope_type '" + type +
                                "' (fsdpp refuses rope settings it does not compute)");
  }
  const double partial = r.number("partial_rotary_factor", c.partial_rotary_factor);
  if (partial != 1.0 && c.model_type != "phi3" && c.model_type != "phi")
    throw std::invalid_argument(where + ": partial_rotary_factor other than 1.0 is not supported for " + c.model_type +
                                " (transformers rotates the whole head there)");
  if (!(partial > 0 && partial <= 1))
    throw std::invalid_argument(where + ": partial_rotary_factor " + std::to_string(partial) + " is not in (0, 1]");
  c.partial_rotary_factor = partial;
  if (!legacy) c.rope_theta = r.number("rope_theta", c.rope_theta);
  if (type == "linear") {  // transformers' _compute_linear_scaling_rope_parameters: inv_freq / factor
    c.rope_linear_factor = r.number("factor", 0.0);
    if (!(c.rope_linear_factor > 0))
      throw std::invalid_argument(where + ": rope_type 'linear' needs a positive 'factor'");
  }
  if (type == "llama3") {
    Llama3RopeScaling scaling;
    scaling.factor = r.number("factor", scaling.factor);
    scaling.low_freq_factor = r.number("low_freq_factor", scaling.low_freq_factor);
    scaling.high_freq_factor = r.number("high_freq_factor", scaling.high_freq_factor);
    scaling.original_max_position_embeddings =
        r.integer("original_max_position_embeddings", scaling.original_max_position_embeddings);
    c.rope_scaling = scaling;
  }
}

// Both layouts: transformers 5 writes rope_parameters {rope_theta, rope_type, ...}; older
// versions top-level rope_theta and rope_scaling. A file with both must agree on theta.
void read_rope(const nlohmann::json& json, const std::string& source, LlamaConfig& c) {
  JsonReader r{json, source};
  c.rope_theta = r.number("rope_theta", c.rope_theta);  // the family's default base until here
  const bool has_parameters = json.contains("rope_parameters") && !json["rope_parameters"].is_null();
  const bool has_scaling = json.contains("rope_scaling") && !json["rope_scaling"].is_null();
  if (has_parameters) {
    const double legacy_theta = c.rope_theta;
    read_rope_object(json["rope_parameters"], source + " rope_parameters", false, c);
    if (json.contains("rope_theta") && !json["rope_theta"].is_null() && legacy_theta != c.rope_theta)
      throw std::invalid_argument(source + ": rope_theta and rope_parameters.rope_theta disagree");
    if (has_scaling && json["rope_scaling"] != json["rope_parameters"])
      throw std::invalid_argument(source + ": rope_scaling and rope_parameters disagree; expected one of them");
  } else if (has_scaling) {
    read_rope_object(json["rope_scaling"], source + " rope_scaling", true, c);
  }
}

// Gemma 3: full-attention and sliding layers rotate with their own settings. transformers 5
// writes rope_parameters {full_attention: {...}, sliding_attention: {...}}; 4.x wrote
// rope_theta (global), rope_local_base_freq and rope_scaling (applied to full attention).
void read_gemma3_rope(const nlohmann::json& json, const std::string& source, LlamaConfig& c) {
  JsonReader r{json, source};
  c.rope_theta = r.number("rope_theta", 1000000.0);
  c.local_rope_theta = r.number("rope_local_base_freq", 10000.0);
  if (json.contains("rope_scaling") && !json["rope_scaling"].is_null())
    read_rope_object(json["rope_scaling"], source + " rope_scaling", true, c);
  if (!json.contains("rope_parameters") || json["rope_parameters"].is_null()) return;
  const auto& by_type = json["rope_parameters"];
  if (!by_type.is_object())
    throw std::invalid_argument(source + ": key 'rope_parameters' is not an object of layer types");
  for (const auto& item : by_type.items())
    if (item.key() != "full_attention" && item.key() != "sliding_attention")
      throw std::invalid_argument(source + ": rope_parameters key '" + item.key() +
                                  "' is not a layer type (full_attention, sliding_attention)");
  LlamaConfig full = c, local = c;
  if (by_type.contains("full_attention") && !by_type["full_attention"].is_null())
    read_rope_object(by_type["full_attention"], source + " rope_parameters.full_attention", false, full);
  if (by_type.contains("sliding_attention") && !by_type["sliding_attention"].is_null()) {
    local.rope_theta = c.local_rope_theta;
    local.rope_scaling.reset();
    local.rope_linear_factor = 1.0;
    read_rope_object(by_type["sliding_attention"], source + " rope_parameters.sliding_attention", false, local);
    if (local.rope_scaling || local.rope_linear_factor != 1.0)
      throw std::invalid_argument(source +
                                  ": rope_parameters.sliding_attention scales its rope; fsdpp computes "
                                  "rope scaling on full-attention layers only");
  }
  c.rope_theta = full.rope_theta;
  c.rope_scaling = full.rope_scaling;
  c.rope_linear_factor = full.rope_linear_factor;
  c.local_rope_theta = local.rope_theta;
}

}  // namespace

namespace {

const KeyTable& family_keys(const std::string& model_type) {
  static const std::set<std::string> kCommon = {
      "vocab_size",          "hidden_size",         "intermediate_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "head_dim",          "max_position_embeddings",
      "rms_norm_eps",        "tie_word_embeddings", "hidden_act",        "rope_theta",
      "rope_scaling",        "rope_parameters",     "attention_dropout", "pad_token_id"};
  static const std::set<std::string> kQwenWindows = {"use_sliding_window", "sliding_window", "max_window_layers",
                                                     "layer_types"};
  auto with = [](std::set<std::string> keys, const std::set<std::string>& more) {
    keys.insert(more.begin(), more.end());
    return keys;
  };
  auto with_reasons = [](std::map<std::string, std::string> keys, const std::map<std::string, std::string>& more) {
    keys.insert(more.begin(), more.end());
    return keys;
  };
  auto without = [](std::set<std::string> keys, const std::string& key) {
    keys.erase(key);
    return keys;
  };
  static const std::set<std::string> kGemma =
      with(without(kCommon, "hidden_act"),
           {"hidden_activation", "attention_bias", "query_pre_attn_scalar", "sliding_window", "layer_types",
            "final_logit_softcapping", "attn_logit_softcapping", "use_bidirectional_attention"});
  static const std::map<std::string, std::string> kGemmaWithoutMath = {
      {"cache_implementation", "generation's KV-cache layout, not the logits"},
      {"hidden_act", "transformers' Gemma reads hidden_activation only"},
      {"sliding_window_size", "an alias older configs carry; transformers reads sliding_window"}};
  static const std::map<std::string, KeyTable> families = {
      {"llama",
       {with(kCommon, {"attention_bias", "mlp_bias"}),
        {{"pretraining_tp", "transformers 5 ignores it; in 4.x it only split the projections' matmuls"}},
        {}}},
      // fsdpp wrote Llama's attention_bias into its Mistral exports before issue 41.
      {"mistral", {with(kCommon, {"sliding_window"}), {}, {{"attention_bias", false}, {"mlp_bias", false}}}},
      {"qwen2", {with(kCommon, kQwenWindows), {}, {{"mlp_bias", false}}}},
      {"qwen3", {with(with(kCommon, kQwenWindows), {"attention_bias"}), {}, {{"mlp_bias", false}}}},
      {"gemma2", {with(kGemma, {}), kGemmaWithoutMath, {}}},
      {"mixtral",
       {with(kCommon, {"sliding_window", "num_local_experts", "num_experts_per_tok", "output_router_logits",
                       "router_aux_loss_coef", "router_jitter_noise"}),
        {},
        {}}},
      // Qwen3MoeConfig reads no max_window_layers (4.x's did); fsdpp refuses use_sliding_window,
      // which the two versions apply to different layers, so without it the key is inert.
      {"qwen3_moe",
       {with(kCommon, {"attention_bias", "use_sliding_window", "sliding_window", "decoder_sparse_step",
                       "moe_intermediate_size", "num_experts_per_tok", "num_experts", "num_local_experts",
                       "norm_topk_prob", "output_router_logits", "router_aux_loss_coef", "mlp_only_layers"}),
        {{"max_window_layers", "only counts with use_sliding_window, which fsdpp refuses for qwen3_moe"}},
        {}}},
      // Phi-1/1.5/2: LayerNorms (layer_norm_eps), no head_dim of its own (its q/k LayerNorms
      // are hidden / heads wide).
      {"phi",
       {with(without(without(kCommon, "rms_norm_eps"), "head_dim"),
             {"layer_norm_eps", "qk_layernorm", "resid_pdrop", "embd_pdrop", "partial_rotary_factor"}),
        {},
        {}}},
      {"phi3",
       {with(kCommon, {"sliding_window", "resid_pdrop", "embd_pdrop", "partial_rotary_factor", "attention_bias"}),
        {{"original_max_position_embeddings", "read by longrope only, which fsdpp refuses"}},
        {}}},
      {"gemma3_text",
       {with(kGemma, {"rope_local_base_freq", "sliding_window_pattern"}),
        with_reasons(kGemmaWithoutMath, {{"_sliding_window_pattern",
                                          "transformers' record of sliding_window_pattern; layer_types "
                                          "(or sliding_window_pattern) decide"}}),
        {}}},
  };
  auto it = families.find(model_type);
  if (it == families.end()) throw std::logic_error("family_keys: not a Llama-like model_type " + model_type);
  return it->second;
}

std::string value_text(const nlohmann::json& value) {
  auto text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

// A sliding_window key: absent means the family's default, null means none (0).
int64_t window_of(const JsonReader& r, int64_t fallback) {
  if (r.json.contains("sliding_window") && r.json["sliding_window"].is_null()) return 0;
  return r.integer("sliding_window", fallback);
}

// Which layers slide: layer_types when the file has it, else the family's rule
// (`default_sliding`). A sliding layer without a window is refused: transformers would give
// it a window of None.
void read_sliding_layers(const nlohmann::json& json, const std::string& source,
                         const std::function<bool(int64_t)>& default_sliding, LlamaConfig& c) {
  c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  const bool listed = json.contains("layer_types") && !json["layer_types"].is_null();
  if (listed) {
    const auto& types = json["layer_types"];
    if (!types.is_array() || static_cast<int64_t>(types.size()) != c.num_hidden_layers)
      throw std::invalid_argument(source + ": key 'layer_types' is " + value_text(types) + ", expected a list of " +
                                  std::to_string(c.num_hidden_layers) + " layer types (num_hidden_layers)");
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "full_attention" && types[i] != "sliding_attention")
        throw std::invalid_argument(source + ": key 'layer_types' makes layer " + std::to_string(i) + " " +
                                    value_text(types[i]) + "; fsdpp computes full_attention and sliding_attention");
      c.sliding_layers[i] = types[i] == "sliding_attention";
    }
  } else {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = default_sliding(i);
  }
  for (size_t i = 0; i < c.sliding_layers.size(); ++i)
    if (c.sliding_layers[i] && c.sliding_window <= 0)
      throw std::invalid_argument(source + ": layer " + std::to_string(i) +
                                  " is a sliding_attention layer, but the config gives no window (sliding_window " +
                                  (json.contains("sliding_window") ? value_text(json["sliding_window"]) : "absent") +
                                  (json.contains("use_sliding_window")
                                       ? ", use_sliding_window " + value_text(json["use_sliding_window"])
                                       : std::string()) +
                                  ")");
}

void refuse_key(const nlohmann::json& json, const std::string& source, const std::string& key, const std::string& why) {
  throw std::invalid_argument(source + ": key '" + key + "' is " + value_text(json[key]) + "; " + why);
}

// The experts of Mixtral (num_local_experts, always renormalised top-k, every layer) and
// Qwen3-MoE (num_experts, norm_topk_prob, moe_intermediate_size, mlp_only_layers,
// decoder_sparse_step), and the load-balancing loss both add with output_router_logits.
void read_experts(const nlohmann::json& json, const std::string& source, LlamaConfig& c) {
  JsonReader r{json, source};
  const bool mixtral = c.model_type == "mixtral";
  if (mixtral) {
    c.rope_theta = 1e6;  // MixtralConfig's default base
    c.num_experts = r.integer("num_local_experts", 8);
    if (r.number("router_jitter_noise", 0.0) != 0.0)
      refuse_key(json, source, "router_jitter_noise", "router jitter is not implemented (expected 0)");
  } else {
    // transformers 5 writes num_local_experts (its attribute_map's name), 4.x num_experts.
    c.num_experts = r.integer("num_local_experts", r.integer("num_experts", 128));
    if (json.contains("num_experts") && json.contains("num_local_experts") && r.integer("num_experts") != c.num_experts)
      refuse_key(json, source, "num_experts", "it disagrees with num_local_experts " + std::to_string(c.num_experts));
    c.normalize_top_k = r.boolean("norm_topk_prob", false);
    c.moe_intermediate_size = r.integer("moe_intermediate_size", 768);
    c.decoder_sparse_step = r.integer("decoder_sparse_step", 1);
    if (c.decoder_sparse_step < 1) refuse_key(json, source, "decoder_sparse_step", "expected a positive layer step");
    if (json.contains("mlp_only_layers") && !json["mlp_only_layers"].is_null()) {
      const auto& layers = json["mlp_only_layers"];
      if (!layers.is_array()) refuse_key(json, source, "mlp_only_layers", "expected a list of layer indices");
      for (const auto& layer : layers) {
        if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= c.num_hidden_layers)
          refuse_key(json, source, "mlp_only_layers",
                     "expected layer indices below num_hidden_layers " + std::to_string(c.num_hidden_layers));
        c.mlp_only_layers.push_back(layer.get<int64_t>());
      }
    }
  }
  c.experts_per_token = r.integer("num_experts_per_tok", mixtral ? 2 : 8);
  if (c.num_experts < 1 || c.experts_per_token < 1 || c.experts_per_token > c.num_experts)
    throw std::invalid_argument(source + ": num_experts_per_tok is " + std::to_string(c.experts_per_token) + " of " +
                                (mixtral ? "num_local_experts " : "num_experts ") + std::to_string(c.num_experts) +
                                ", expected 1 <= k <= experts");
  c.output_router_logits = r.boolean("output_router_logits", false);
  c.router_aux_loss_coef = r.number("router_aux_loss_coef", 0.001);
}

}  // namespace

void read_rope_settings(const nlohmann::json& json, const std::string& source, LlamaConfig& c) {
  read_rope(json, source, c);
}

const std::vector<std::string>& llama_model_types() {
  static const std::vector<std::string> types = {"llama",       "mistral", "qwen2", "qwen3",   "gemma2",
                                                 "gemma3_text", "phi3",    "phi",   "mixtral", "qwen3_moe"};
  return types;
}

int64_t LlamaConfig::window_of_layer(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  if (sliding_layers.empty()) return sliding_window;  // Mistral: every layer
  return sliding_layers.at(static_cast<size_t>(layer)) ? sliding_window : 0;
}

bool LlamaConfig::is_sparse_layer(int64_t layer) const {
  // Qwen2MoeDecoderLayer's rule; Mixtral's configs leave both at their defaults.
  return num_experts > 0 && std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end() &&
         (layer + 1) % decoder_sparse_step == 0;
}

// Defaults are transformers' own for each family (LlamaConfig, MistralConfig, Qwen2Config,
// Qwen3Config, Gemma2Config, Gemma3TextConfig), so a key left out means what it means there.
LlamaConfig LlamaConfig::from_json(const nlohmann::json& json, const std::string& source) {
  JsonReader r{json, source};
  LlamaConfig c;
  c.model_type = r.text("model_type", "llama");
  const auto& types = llama_model_types();
  if (std::find(types.begin(), types.end(), c.model_type) == types.end()) {
    std::string known;
    for (const auto& type : types) known += (known.empty() ? "" : ", ") + type;
    throw std::invalid_argument(source + ": model_type '" + c.model_type + "' is not a Llama-like family (" + known +
                                ")");
  }
  refuse_unknown_keys(json, source, c.model_type, family_keys(c.model_type));
  const bool qwen = c.model_type == "qwen2" || c.model_type == "qwen3";
  const bool gemma3 = c.model_type == "gemma3_text";
  const bool phi3 = c.model_type == "phi3";
  const bool phi = c.model_type == "phi";
  const bool mixtral = c.model_type == "mixtral";
  const bool qwen3_moe = c.model_type == "qwen3_moe";
  const bool gemma = c.model_type == "gemma2" || gemma3;
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  const int64_t default_kv_heads = c.model_type == "mistral" || mixtral ? 8
                                   : qwen                               ? 32
                                   : gemma || qwen3_moe                 ? 4
                                                                        : c.num_attention_heads;
  c.num_key_value_heads = r.integer("num_key_value_heads", default_kv_heads);
  c.head_dim = r.integer("head_dim", c.model_type == "qwen3" ? 128 : gemma ? 256 : 0);
  const int64_t default_positions = c.model_type == "mistral" || mixtral ? 4096 * 32
                                    : phi3                               ? 4096
                                    : qwen || qwen3_moe                  ? 32768
                                    : gemma3                             ? 131072
                                    : gemma                              ? 8192
                                                                         : 2048;
  c.max_position_embeddings = r.integer("max_position_embeddings", default_positions);
  c.rms_norm_eps = phi ? r.number("layer_norm_eps", 1e-5) : r.number("rms_norm_eps", phi3 || mixtral ? 1e-5 : 1e-6);
  if (mixtral || qwen3_moe) read_experts(json, source, c);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", gemma);
  // Absent: the family's default (Gemma's 0); null: no padding row.
  const bool pad_null = json.contains("pad_token_id") && json["pad_token_id"].is_null();
  c.pad_token_id = pad_null ? -1 : r.integer("pad_token_id", gemma ? 0 : phi3 ? 32000 : -1);
  if (c.pad_token_id >= c.vocab_size || c.pad_token_id < -1)
    throw std::invalid_argument(source + ": key 'pad_token_id' is " + std::to_string(c.pad_token_id) +
                                ", expected a token id below vocab_size " + std::to_string(c.vocab_size));
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;  // Qwen2Attention: q/k/v always biased, o_proj never
  } else if (phi) {
    // PhiAttention: q/k/v and dense always biased; its lm_head too, never tied.
    c.qkv_bias = c.o_proj_bias = true;
    c.mlp_bias = true;
    for (const char* key : {"resid_pdrop", "embd_pdrop"})
      if (r.number(key, 0.0) != 0.0) refuse_key(json, source, key, "dropout is not implemented (expected 0)");
    if (c.tie_word_embeddings)
      refuse_key(json, source, "tie_word_embeddings", "fsdpp's Phi has an untied, biased lm_head (expected false)");
  } else if (phi3) {
    // Phi3Attention and Phi3MLP have no biases; transformers 4.x wrote attention_bias false.
    if (r.boolean("attention_bias", false))
      refuse_key(json, source, "attention_bias", "Phi-3's projections have no bias in transformers");
    for (const char* key : {"resid_pdrop", "embd_pdrop"})
      if (r.number(key, 0.0) != 0.0) refuse_key(json, source, key, "dropout is not implemented (expected 0)");
    c.fused_projections = true;
  } else if (c.model_type != "mistral") {
    c.qkv_bias = c.o_proj_bias = r.boolean("attention_bias", false);
  }
  if (!phi) c.mlp_bias = c.model_type == "llama" && r.boolean("mlp_bias", false);
  c.qk_norm = c.model_type == "qwen3" || qwen3_moe || gemma3 || (phi && r.boolean("qk_layernorm", false));
  c.gemma_norms = gemma;
  c.hidden_act =
      gemma ? r.text("hidden_activation", "gelu_pytorch_tanh") : r.text("hidden_act", phi ? "gelu_new" : "silu");
  if (phi ? c.hidden_act != "gelu_new" : c.hidden_act != "silu" && c.hidden_act != "gelu_pytorch_tanh")
    refuse_key(json, source, gemma ? "hidden_activation" : "hidden_act",
               phi ? "fsdpp's Phi computes gelu_new only" : "fsdpp computes silu and gelu_pytorch_tanh only");
  if (r.number("attention_dropout", 0.0) != 0.0)
    refuse_key(json, source, "attention_dropout", "attention dropout is not implemented (expected 0)");
  if (phi3 || phi) c.partial_rotary_factor = r.number("partial_rotary_factor", phi ? 0.5 : 1.0);  // 4.x: top level
  if (gemma3) {
    read_gemma3_rope(json, source, c);
  } else {
    read_rope(json, source, c);
  }
  if (c.rotary_dims() < 2 || c.rotary_dims() % 2 != 0)
    throw std::invalid_argument(source + ": partial_rotary_factor " + std::to_string(c.partial_rotary_factor) +
                                " rotates " + std::to_string(c.rotary_dims()) + " of " +
                                std::to_string(c.dim_per_head()) + " dims per head; expected an even count");
  if (c.num_attention_heads < 1 || c.num_key_value_heads < 1)
    throw std::invalid_argument(source + ": num_attention_heads is " + std::to_string(c.num_attention_heads) +
                                " and num_key_value_heads " + std::to_string(c.num_key_value_heads) +
                                ", expected both at least 1");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw std::invalid_argument(source + ": num_attention_heads is not a multiple of num_key_value_heads");
  if (c.model_type == "mistral" || phi3 || mixtral) {
    // MistralAttention, Phi3Attention: every layer, when not null (Phi-3's default: null).
    c.sliding_window = window_of(r, c.model_type == "mistral" ? 4096 : 0);
  } else if (qwen3_moe) {
    // Qwen3MoeConfig: the window counts only with use_sliding_window.
    if (r.boolean("use_sliding_window", false))
      refuse_key(json, source, "use_sliding_window",
                 "transformers 4.x slides qwen3_moe's layers from max_window_layers on and 5.x every layer; "
                 "fsdpp refuses rather than pick one (expected false)");
    window_of(r, 4096);  // type-checked; inert without use_sliding_window
  } else if (qwen) {
    // Qwen2Config.__post_init__: the window counts only with use_sliding_window, and then
    // (without layer_types) for the layers from max_window_layers on.
    c.sliding_window = r.boolean("use_sliding_window", false) ? window_of(r, 4096) : 0;
    const int64_t first_sliding = r.integer("max_window_layers", 28);
    read_sliding_layers(
        json, source, [&](int64_t i) { return c.sliding_window > 0 && i >= first_sliding; }, c);
  } else if (gemma) {
    c.sliding_window = window_of(r, 4096);
    // Gemma 2 alternates, sliding first; Gemma 3 slides but every sliding_window_pattern-th.
    const int64_t pattern = gemma3 ? r.integer("sliding_window_pattern", 6) : 2;
    if (pattern < 1) refuse_key(json, source, "sliding_window_pattern", "expected a positive layer count");
    read_sliding_layers(
        json, source, [&](int64_t i) { return (i + 1) % pattern != 0; }, c);
    if (json.contains("use_bidirectional_attention") && r.boolean("use_bidirectional_attention", false))
      refuse_key(json, source, "use_bidirectional_attention", "fsdpp computes causal attention only");
    c.query_pre_attn_scalar = r.number("query_pre_attn_scalar", 256);
    if (!(c.query_pre_attn_scalar > 0)) refuse_key(json, source, "query_pre_attn_scalar", "expected a positive number");
    // Absent: the family's default; null: no capping.
    auto cap = [&](const char* key, double fallback) {
      if (!json.contains(key)) return fallback;
      if (json[key].is_null()) return 0.0;
      const double value = r.number(key, 0.0);
      if (!(value > 0)) refuse_key(json, source, key, "expected a positive cap or null");
      return value;
    };
    c.final_logit_softcapping = cap("final_logit_softcapping", gemma3 ? 0.0 : 30.0);
    c.attn_logit_softcapping = cap("attn_logit_softcapping", gemma3 ? 0.0 : 50.0);
  }
  return c;
}

// The family's own config.json: the keys transformers writes for it (both the 4.x
// rope_theta/rope_scaling and, through them, 5.x's rope_parameters are read back).
nlohmann::json LlamaConfig::to_json() const {
  static const std::map<std::string, std::string> architectures = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"}, {"gemma2", "Gemma2ForCausalLM"},   {"gemma3_text", "Gemma3ForCausalLM"},
      {"phi3", "Phi3ForCausalLM"},   {"mixtral", "MixtralForCausalLM"}, {"qwen3_moe", "Qwen3MoeForCausalLM"},
      {"phi", "PhiForCausalLM"}};
  const bool gemma = model_type == "gemma2" || model_type == "gemma3_text";
  nlohmann::json j = {{"model_type", model_type},
                      {"architectures", {architectures.at(model_type)}},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"num_key_value_heads", num_key_value_heads},
                      {"head_dim", dim_per_head()},
                      {"max_position_embeddings", max_position_embeddings},
                      {"rms_norm_eps", rms_norm_eps},
                      {"rope_theta", rope_theta},
                      {"tie_word_embeddings", tie_word_embeddings},
                      {gemma ? "hidden_activation" : "hidden_act", hidden_act},
                      {"pad_token_id", pad_token_id >= 0 ? nlohmann::json(pad_token_id) : nlohmann::json(nullptr)},
                      {"rope_scaling", nullptr}};
  if (model_type == "llama" || model_type == "qwen3" || model_type == "qwen3_moe" || gemma)
    j["attention_bias"] = qkv_bias;
  if (model_type == "llama") j["mlp_bias"] = mlp_bias;
  if (model_type == "mistral" || model_type == "phi3" || model_type == "mixtral")
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
  if (num_experts > 0) {
    j["num_local_experts"] = num_experts;
    j["num_experts_per_tok"] = experts_per_token;
    j["output_router_logits"] = output_router_logits;
    j["router_aux_loss_coef"] = router_aux_loss_coef;
  }
  if (model_type == "mixtral") j["router_jitter_noise"] = 0.0;
  if (model_type == "qwen3_moe") {
    j["moe_intermediate_size"] = expert_intermediate_size();
    j["norm_topk_prob"] = normalize_top_k;
    j["decoder_sparse_step"] = decoder_sparse_step;
    j["mlp_only_layers"] = mlp_only_layers;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  if (model_type == "phi3" || model_type == "phi") {
    j["partial_rotary_factor"] = partial_rotary_factor;
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
  }
  if (model_type == "phi") {
    j.erase("head_dim");
    j.erase("rms_norm_eps");
    j["layer_norm_eps"] = rms_norm_eps;
    j["qk_layernorm"] = qk_norm;
  }
  std::vector<std::string> layer_types;
  bool any_sliding = false;
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    any_sliding = any_sliding || window_of_layer(i) > 0;
    layer_types.emplace_back(window_of_layer(i) > 0 ? "sliding_attention" : "full_attention");
  }
  if (model_type == "qwen2" || model_type == "qwen3") {
    j["use_sliding_window"] = any_sliding;
    j["sliding_window"] = any_sliding ? nlohmann::json(sliding_window) : nullptr;
    j["max_window_layers"] = num_hidden_layers;  // not read: layer_types names every layer
    j["layer_types"] = layer_types;
  }
  if (gemma) {
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nullptr;
    j["layer_types"] = layer_types;
    // Gemma2Config and Gemma3TextConfig declare it an int, and their strict dataclass refuses
    // 20.0 where it wants 20.
    const auto scalar = static_cast<int64_t>(query_pre_attn_scalar);
    j["query_pre_attn_scalar"] = static_cast<double>(scalar) == query_pre_attn_scalar
                                     ? nlohmann::json(scalar)
                                     : nlohmann::json(query_pre_attn_scalar);
    auto cap = [](double value) { return value > 0 ? nlohmann::json(value) : nlohmann::json(nullptr); };
    j["final_logit_softcapping"] = cap(final_logit_softcapping);
    j["attn_logit_softcapping"] = cap(attn_logit_softcapping);
    j["use_bidirectional_attention"] = false;
  }
  if (model_type == "gemma3_text") j["rope_local_base_freq"] = local_rope_theta > 0 ? local_rope_theta : rope_theta;
  if (rope_linear_factor != 1.0) j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_linear_factor}};
  if (rope_scaling)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_scaling->factor},
                         {"low_freq_factor", rope_scaling->low_freq_factor},
                         {"high_freq_factor", rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings", rope_scaling->original_max_position_embeddings}};
  return j;
}

int64_t LlamaConfig::parameter_count() const {
  const int64_t d = hidden_size, hd = dim_per_head();
  const int64_t q = num_attention_heads * hd, kv = num_key_value_heads * hd;
  if (model_type == "phi") {  // every projection biased, LayerNorms (weight and bias), a biased head
    const int64_t attention = d * q + 2 * d * kv + q * d + q + 2 * kv + d + (qk_norm ? 4 * hd : 0);
    const int64_t mlp = 2 * d * intermediate_size + intermediate_size + d;
    return num_hidden_layers * (attention + mlp + 2 * d) + 2 * vocab_size * d + vocab_size + 2 * d;
  }
  int64_t attention = d * q + 2 * d * kv + q * d;  // fused or not, the same weights
  if (qkv_bias) attention += q + 2 * kv;
  if (o_proj_bias) attention += d;
  if (qk_norm) attention += 2 * hd;
  const int64_t dense_mlp = 3 * d * intermediate_size + (mlp_bias ? 2 * intermediate_size + d : 0);
  const int64_t sparse_mlp = num_experts * (3 * d * expert_intermediate_size() + d);  // experts + router rows
  int64_t layers = 0;
  for (int64_t i = 0; i < num_hidden_layers; ++i)
    layers += attention + (is_sparse_layer(i) ? sparse_mlp : dense_mlp) + (gemma_norms ? 4 : 2) * d;  // + norms
  const int64_t embeddings = vocab_size * d * (tie_word_embeddings ? 1 : 2);
  return layers + embeddings + d;  // + final norm
}

LlamaConfig llama_preset(const std::string& name) {
  auto make = [](int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                 int64_t max_pos, double theta, bool tied) {
    LlamaConfig c;
    c.vocab_size = vocab;
    c.hidden_size = hidden;
    c.intermediate_size = inter;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv;
    c.max_position_embeddings = max_pos;
    c.rope_theta = theta;
    c.tie_word_embeddings = tied;
    return c;
  };
  static const std::map<std::string, LlamaConfig> presets = [&] {
    std::map<std::string, LlamaConfig> p;
    p["tiny"] = make(97, 16, 40, 2, 4, 2, 64, 10000, false);
    p["125M"] = make(32000, 768, 2048, 12, 12, 12, 2048, 10000, true);
    p["350M"] = make(32000, 1024, 2816, 24, 16, 16, 2048, 10000, true);
    LlamaConfig one = make(128256, 2048, 8192, 16, 32, 8, 131072, 500000, true);  // Llama 3.2 1B
    one.head_dim = 64;
    one.rope_scaling = Llama3RopeScaling{32.0, 1.0, 4.0, 8192};
    p["1B"] = one;
    LlamaConfig three = make(128256, 3072, 8192, 28, 24, 8, 131072, 500000, true);  // Llama 3.2 3B
    three.head_dim = 128;
    three.rope_scaling = Llama3RopeScaling{32.0, 1.0, 4.0, 8192};
    p["3B"] = three;
    p["7B"] = make(32000, 4096, 11008, 32, 32, 32, 4096, 10000, false);  // Llama 2 7B
    // Llama 3 8B: meta-llama/Meta-Llama-3-8B's config.json (no rope_scaling, untied).
    p["8B"] = make(128256, 4096, 14336, 32, 32, 8, 8192, 500000, false);
    p["13B"] = make(32000, 5120, 13824, 40, 40, 40, 4096, 10000, false);  // Llama 2 13B
    p["70B"] = make(32000, 8192, 28672, 80, 64, 8, 4096, 10000, false);   // Llama 2 70B
    return p;
  }();
  auto it = presets.find(name);
  if (it == presets.end()) {
    std::string known;
    for (const auto& n : llama_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown model size '" + name + "': expected one of " + known);
  }
  return it->second;
}

const std::vector<std::string>& llama_preset_names() {
  static const std::vector<std::string> names = {"tiny", "125M", "350M", "1B", "3B", "7B", "8B", "13B", "70B"};
  return names;
}

torch::Tensor rope_inverse_frequencies(const LlamaConfig& c, double theta) {
  const int64_t hd = c.rotary_dims();
  const double base = theta > 0 ? theta : c.rope_theta;
  // transformers' rope functions op for op, in fp32 (Python's `x / tensor` is
  // tensor.reciprocal() * x): the table gets transformers' bits, not the correctly rounded
  // ones, which differ in the last place for most bases. Default, then linear's / factor.
  auto inv = torch::reciprocal(torch::pow(base, torch::arange(0, hd, 2, torch::kLong).to(torch::kFloat) / hd));
  if (!c.rope_scaling) return c.rope_linear_factor != 1.0 ? inv / c.rope_linear_factor : inv;
  // Llama 3 (_compute_llama3_parameters): keep high frequencies, divide low ones by
  // `factor`, blend in between.
  const auto& s = *c.rope_scaling;
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_context / s.low_freq_factor, high_wavelen = old_context / s.high_freq_factor;
  const auto wavelen = inv.reciprocal() * (2 * M_PI);
  const auto scaled = torch::where(wavelen > low_wavelen, inv / s.factor, inv);
  const auto smooth =
      (wavelen.reciprocal() * old_context - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const auto medium = (wavelen < high_wavelen).logical_not() * (wavelen > low_wavelen).logical_not();
  return torch::where(medium, smoothed, scaled);
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& c, int64_t layer, std::shared_ptr<RotaryTable> rotary_)
    : heads(c.num_attention_heads),
      kv_heads(c.num_key_value_heads),
      head_dim(c.dim_per_head()),
      attention{c.query_pre_attn_scalar > 0 ? 1.0 / std::sqrt(c.query_pre_attn_scalar) : 0.0, c.window_of_layer(layer),
                c.attn_logit_softcapping},
      rotary(std::move(rotary_)) {
  auto linear = [&](const char* name, int64_t in, int64_t out, bool bias) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)));
  };
  if (c.fused_projections) {
    qkv_proj = linear("qkv_proj", c.hidden_size, (heads + 2 * kv_heads) * head_dim, c.qkv_bias);
  } else {
    q_proj = linear("q_proj", c.hidden_size, heads * head_dim, c.qkv_bias);
    k_proj = linear("k_proj", c.hidden_size, kv_heads * head_dim, c.qkv_bias);
    v_proj = linear("v_proj", c.hidden_size, kv_heads * head_dim, c.qkv_bias);
  }
  o_proj = linear("o_proj", heads * head_dim, c.hidden_size, c.o_proj_bias);
  if (c.qk_norm) {  // Qwen3Attention, Gemma3Attention: over head_dim only, so one weight serves every head
    q_norm = register_module("q_norm", RmsNorm(head_dim, c.rms_norm_eps, c.gemma_norms));
    k_norm = register_module("k_norm", RmsNorm(head_dim, c.rms_norm_eps, c.gemma_norms));
  }
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t s = x.size(1);
  torch::Tensor q, k, v;
  if (qkv_proj) {  // Phi3Attention: [q | k | v] along the output
    auto qkv = nn::call(qkv_proj, x).split({heads * head_dim, kv_heads * head_dim, kv_heads * head_dim}, -1);
    q = split_heads(qkv[0], heads), k = split_heads(qkv[1], kv_heads), v = split_heads(qkv[2], kv_heads);
  } else {
    q = split_heads(nn::call(q_proj, x), heads);
    k = split_heads(nn::call(k_proj, x), kv_heads);
    v = split_heads(nn::call(v_proj, x), kv_heads);
  }
  if (q_norm) {  // [b, heads, s, head_dim]: each head normalised on its own, before rope
    q = nn::call(q_norm, q);
    k = nn::call(k_norm, k);
  }
  auto [cos, sin] = rotary->cos_sin(s, x.device(), q.scalar_type());
  q = apply_rotary(q, cos, sin);
  k = apply_rotary(k, cos, sin);
  if (kv_heads != heads) {  // grouped-query attention: each KV head serves heads/kv_heads queries
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  }
  return nn::call(o_proj, merge_heads(causal_attention(q, k, v, attention)));
}

LlamaMlpImpl::LlamaMlpImpl(const LlamaConfig& c)
    : gelu_tanh(c.hidden_act == "gelu_pytorch_tanh"), summed(!c.gemma_norms) {
  auto linear = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(c.mlp_bias)));
  };
  if (c.fused_projections) {
    gate_up_proj = linear("gate_up_proj", c.hidden_size, 2 * c.intermediate_size);
  } else {
    gate_proj = linear("gate_proj", c.hidden_size, c.intermediate_size);
    up_proj = linear("up_proj", c.hidden_size, c.intermediate_size);
  }
  down_proj = linear("down_proj", c.intermediate_size, c.hidden_size);
}

// Llama's decoder layer only adds the MLP's output to the residual stream and returns the
// sum: the down-projection's value is summed, never saved (nn::call_summed). Gemma's
// normalises it first, so there it is an ordinary call.
torch::Tensor LlamaMlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor gate, up;
  if (gate_up_proj) {  // Phi3MLP: gate, up = gate_up_proj(x).chunk(2)
    auto both = nn::call(gate_up_proj, x).chunk(2, -1);
    gate = both[0], up = both[1];
  } else {
    gate = nn::call(gate_proj, x), up = nn::call(up_proj, x);
  }
  auto h = (gelu_tanh ? torch::gelu(gate, "tanh") : torch::silu(gate)) * up;
  return summed ? nn::call_summed(down_proj, h) : nn::call(down_proj, h);
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& c, int64_t layer, std::shared_ptr<RotaryTable> rotary,
                                             const std::shared_ptr<RouterLogits>& router_logits) {
  auto norm = [&](const char* name) {
    return register_module(name, RmsNorm(c.hidden_size, c.rms_norm_eps, c.gemma_norms));
  };
  input_layernorm = norm("input_layernorm");
  self_attn = register_module("self_attn", LlamaAttention(c, layer, std::move(rotary)));
  post_attention_layernorm = norm("post_attention_layernorm");
  if (c.gemma_norms) pre_feedforward_layernorm = norm("pre_feedforward_layernorm");
  if (c.is_sparse_layer(layer)) {
    const bool qwen = c.model_type == "qwen3_moe";
    MoeOptions options{c.hidden_size,     c.expert_intermediate_size(),    c.num_experts,      c.experts_per_token,
                       c.normalize_top_k, /*weights_in_input_dtype=*/qwen, /*qwen_names=*/qwen};
    moe = register_module(qwen ? "mlp" : "block_sparse_moe", SparseMoe(options, router_logits));
  } else {
    mlp = register_module("mlp", LlamaMlp(c));
  }
  if (c.gemma_norms) post_feedforward_layernorm = norm("post_feedforward_layernorm");
}

torch::Tensor LlamaDecoderLayerImpl::forward(torch::Tensor x) {
  if (pre_feedforward_layernorm) {  // Gemma2DecoderLayer
    x = x + nn::call(post_attention_layernorm, nn::call(self_attn, nn::call(input_layernorm, x)));
    return x + nn::call(post_feedforward_layernorm, nn::call(mlp, nn::call(pre_feedforward_layernorm, x)));
  }
  x = x + nn::call(self_attn, nn::call(input_layernorm, x));
  if (moe) return x + nn::call(moe, nn::call(post_attention_layernorm, x));
  return x + nn::call(mlp, nn::call(post_attention_layernorm, x));
}

// Each part goes to the meta device as soon as it is built under nn::DeferredInit.
LlamaModelImpl::LlamaModelImpl(const LlamaConfig& c, const std::shared_ptr<RouterLogits>& router_logits)
    : embed_scale(c.gemma_norms ? std::sqrt(static_cast<double>(c.hidden_size)) : 1.0),
      rotary(std::make_shared<RotaryTable>(rope_inverse_frequencies(c))) {
  if (c.local_rope_theta > 0) {  // Gemma 3's sliding layers: their own base, unscaled
    LlamaConfig local = c;
    local.rope_scaling.reset();
    local.rope_linear_factor = 1.0;
    local_rotary = std::make_shared<RotaryTable>(rope_inverse_frequencies(local, c.local_rope_theta));
  }
  auto embedding = torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size);
  if (c.pad_token_id >= 0) embedding.padding_idx(c.pad_token_id);  // that row gets no gradient, as in HF
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(embedding));
  nn::release_to_meta(*embed_tokens);
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const bool local = local_rotary && c.window_of_layer(i) > 0;
    layer_list.emplace_back(c, i, local ? local_rotary : rotary, router_logits);
    layers->push_back(layer_list.back());
    nn::release_to_meta(*layer_list.back());
  }
  norm = register_module("norm", RmsNorm(c.hidden_size, c.rms_norm_eps, c.gemma_norms));
  nn::release_to_meta(*norm);
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& tokens) {
  auto x = nn::call(embed_tokens, tokens);
  // Gemma's scaled embedding: sqrt(hidden) rounded to the embedding's dtype first.
  if (embed_scale != 1.0) x = x * at::scalar_tensor(embed_scale, x.options().dtype(at::kFloat)).to(x.scalar_type());
  for (auto& layer : layer_list) x = nn::call(layer, x);
  return nn::call(norm, x);
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& c)
    : config(c), router_logits(c.has_auxiliary_loss() ? std::make_shared<RouterLogits>() : nullptr) {
  model = register_module("model", LlamaModel(c, router_logits));
  lm_head = register_module(
      "lm_head", c.tie_word_embeddings ? LmHead(model->embed_tokens->weight) : LmHead(c.hidden_size, c.vocab_size));
  nn::release_to_meta(*lm_head);  // untied: a part of its own; tied: meta already when deferred
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& tokens) {
  if (router_logits) router_logits->clear();
  auto logits = nn::call(lm_head, nn::call(model, tokens));
  const double cap = config.final_logit_softcapping;  // Gemma 2: cap * tanh(logits / cap)
  return cap > 0 ? torch::tanh(logits / cap) * cap : logits;
}

}  // namespace fsdpp::models

namespace fsdpp::models {

torch::Tensor LlamaForCausalLMImpl::auxiliary_loss() const {
  if (!router_logits) throw std::logic_error("auxiliary_loss: the config has no output_router_logits");
  return load_balancing_loss(*router_logits, config.num_experts, config.experts_per_token) *
         config.router_aux_loss_coef;
}

}  // namespace fsdpp::models
