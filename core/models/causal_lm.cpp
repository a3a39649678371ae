#include "core/models/causal_lm.h"

#include "core/models/gpt2.h"
#include "core/models/llama.h"
#include "core/models/opt.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = {"gpt2", "opt", "llama", "mistral"};
  return types;
}

namespace {

template <class Holder, class Config>
CausalLm make_lm(const std::string& type, const Config& c, const char* block_type, int64_t vocab, int64_t positions) {
  Holder model(c);
  CausalLm lm;
  lm.model_type = type;
  lm.module = model.ptr();
  lm.logits = [model](const torch::Tensor& tokens) mutable { return nn::call(model, tokens); };
  lm.block_type = block_type;
  lm.vocab_size = vocab;
  lm.max_positions = positions;
  lm.config = c.to_json();
  lm.config["model_type"] = type;
  return lm;
}

}  // namespace

CausalLm build_causal_lm(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) throw std::invalid_argument(source + ": expected a JSON object");
  if (!config.contains("model_type") || !config["model_type"].is_string())
    throw std::invalid_argument(source + ": key 'model_type' is missing (expected gpt2, opt, llama or mistral)");
  const auto type = config["model_type"].get<std::string>();
  if (type == "gpt2") {
    auto c = Gpt2Config::from_json(config, source);
    return make_lm<Gpt2LMHeadModel>(type, c, "fsdpp::models::Gpt2BlockImpl", c.vocab_size, c.n_positions);
  }
  if (type == "opt") {
    auto c = OptConfig::from_json(config, source);
    return make_lm<OptForCausalLM>(type, c, "fsdpp::models::OptLayerImpl", c.vocab_size, c.max_position_embeddings);
  }
  if (type == "llama" || type == "mistral") {
    auto c = LlamaConfig::from_json(config, source);
    return make_lm<LlamaForCausalLM>(type, c, "fsdpp::models::LlamaDecoderLayerImpl", c.vocab_size,
                                     c.max_position_embeddings);
  }
  throw std::invalid_argument(source + ": unknown model_type '" + type + "' (expected gpt2, opt, llama or mistral)");
}

}  // namespace fsdpp::models
