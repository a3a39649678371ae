#include "core/models/hf_json.h"

#include <stdexcept>

namespace fsdpp::models {

namespace {

[[noreturn]] void bad(const JsonReader& r, const std::string& key, const char* expected) {
  throw std::invalid_argument(r.source + ": key '" + key + "' " +
                              (r.json.contains(key) ? std::string("is not ") + expected : std::string("is missing")) +
                              (r.json.contains(key) ? "" : std::string(" (expected ") + expected + ")"));
}

}  // namespace

int64_t JsonReader::integer(const std::string& key) const {
  if (!json.contains(key) || !json[key].is_number_integer()) bad(*this, key, "an integer");
  return json[key].get<int64_t>();
}

int64_t JsonReader::integer(const std::string& key, int64_t fallback) const {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  return integer(key);
}

double JsonReader::number(const std::string& key, double fallback) const {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  if (!json[key].is_number()) bad(*this, key, "a number");
  return json[key].get<double>();
}

bool JsonReader::boolean(const std::string& key, bool fallback) const {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  if (!json[key].is_boolean()) bad(*this, key, "true or false");
  return json[key].get<bool>();
}

std::string JsonReader::text(const std::string& key, const std::string& fallback) const {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  if (!json[key].is_string()) bad(*this, key, "a string");
  return json[key].get<std::string>();
}

const std::map<std::string, std::string>& config_keys_without_math() {
  static const std::map<std::string, std::string> keys = {
      {"_name_or_path", "where transformers loaded it from"},
      {"_attn_implementation_autoset", "transformers' attention-kernel choice (eager, sdpa): the same math"},
      {"architectures", "the class transformers instantiates; model_type decides here"},
      {"model_type", "read by parse_causal_lm_config"},
      {"transformers_version", "provenance"},
      {"dtype", "the tensors carry their own dtype"},
      {"auto_map", "remote-code class names; transformers' own class for model_type is what runs"},
      {"torch_dtype", "transformers 4's name for dtype"},
      {"use_cache", "the KV cache of generation; fsdpp recomputes the sequence, same logits"},
      {"initializer_range", "random initialisation only; fsdpp's from-scratch init is its own"},
      {"bos_token_id", "a tokenizer id, not part of the forward pass"},
      {"eos_token_id", "a tokenizer id, not part of the forward pass"},
      {"output_attentions", "what transformers returns besides the logits"},
      {"output_hidden_states", "what transformers returns besides the logits"},
      {"return_dict", "what transformers returns besides the logits"},
      {"chunk_size_feed_forward", "unused by these families' modeling code"},
      {"is_encoder_decoder", "false for every causal LM here; the architecture is model_type's"},
      {"id2label", "sequence-classification heads only"},
      {"label2id", "sequence-classification heads only"},
      {"problem_type", "sequence-classification heads only"},
  };
  return keys;
}

void refuse_unknown_keys(const nlohmann::json& json, const std::string& source, const std::string& model_type,
                         const KeyTable& table) {
  auto value_text = [](const nlohmann::json& value) {
    auto text = value.dump();
    return text.size() > 60 ? text.substr(0, 57) + "..." : text;
  };
  for (const auto& item : json.items()) {
    const auto& key = item.key();
    if (table.computed.count(key) || table.without_math.count(key) || config_keys_without_math().count(key)) continue;
    auto fixed = table.fixed.find(key);
    if (fixed != table.fixed.end()) {
      if (item.value() == fixed->second) continue;
      throw std::invalid_argument(source + ": key '" + key + "' is " + value_text(item.value()) + ", but " +
                                  model_type + " computes it as " + value_text(fixed->second) + " only");
    }
    throw std::invalid_argument(source + ": key '" + key + "' (" + value_text(item.value()) +
                                ") is not one fsdpp knows for model_type '" + model_type +
                                "'; refusing it rather than ignoring what it may change");
  }
}

}  // namespace fsdpp::models
