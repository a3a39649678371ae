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

CausalLm build_causal_lm(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) throw std::invalid_argument(source + ": expected a JSON object");
  if (!config.contains("model_type") || !config["model_type"].is_string())
    throw std::invalid_argument(source + ": key 'model_type' is missing (expected gpt2, opt, llama or mistral)");
  CausalLm lm;
  lm.model_type = config["model_type"].get<std::string>();
  if (lm.model_type == "gpt2") {
    auto c = Gpt2Config::from_json(config, source);
    Gpt2LMHeadModel m(c);
    lm.module = m.ptr();
    lm.logits = [m](const torch::Tensor& t) mutable { return nn::call(m, t); };
    lm.block_type = "fsdpp::models::Gpt2BlockImpl";
    lm.vocab_size = c.vocab_size;
    lm.max_positions = c.n_positions;
    lm.config = c.to_json();
  } else if (lm.model_type == "opt") {
    auto c = OptConfig::from_json(config, source);
    OptForCausalLM m(c);
    lm.module = m.ptr();
    lm.logits = [m](const torch::Tensor& t) mutable { return nn::call(m, t); };
    lm.block_type = "fsdpp::models::OptLayerImpl";
    lm.vocab_size = c.vocab_size;
    lm.max_positions = c.max_position_embeddings;
    lm.config = c.to_json();
  } else if (lm.model_type == "llama" || lm.model_type == "mistral") {
    auto c = LlamaConfig::from_json(config, source);
    LlamaForCausalLM m(c);
    lm.module = m.ptr();
    lm.logits = [m](const torch::Tensor& t) mutable { return nn::call(m, t); };
    lm.block_type = "fsdpp::models::LlamaDecoderLayerImpl";
    lm.vocab_size = c.vocab_size;
    lm.max_positions = c.max_position_embeddings;
    lm.config = c.to_json();
    lm.config["model_type"] = lm.model_type;
  } else {
    throw std::invalid_argument(source + ": unknown model_type '" + lm.model_type +
                                "' (expected gpt2, opt, llama or mistral)");
  }
  return lm;
}

}  // namespace fsdpp::models
