#include "core/models/causal_lm.h"

#include <algorithm>
#include <type_traits>

#include "core/models/falcon.h"
#include "core/models/gpt2.h"
#include "core/models/llama.h"
#include "core/models/opt.h"
#include "core/models/phi.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> all = {"gpt2", "opt"};
    for (const auto& type : llama_model_types()) all.push_back(type);
    all.emplace_back("falcon");
    return all;
  }();
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
  if constexpr (std::is_same_v<Config, LlamaConfig>) {
    lm.data_dependent_parameters = c.num_experts > 0;
    if constexpr (std::is_same_v<Holder, LlamaForCausalLM>)
      if (model->router_logits) lm.auxiliary_loss = [model] { return model->auxiliary_loss(); };
  }
  return lm;
}

}  // namespace

namespace {

std::string type_list() {
  std::string list;
  for (const auto& type : supported_model_types()) list += (list.empty() ? "" : ", ") + type;
  return list;
}

// The family's config parsed once; `make` receives the typed config and its limits.
template <class Make>
auto dispatch(const nlohmann::json& config, const std::string& source, Make&& make) {
  if (!config.is_object()) throw std::invalid_argument(source + ": expected a JSON object");
  if (!config.contains("model_type") || !config["model_type"].is_string())
    throw std::invalid_argument(source + ": key 'model_type' is missing (expected one of " + type_list() + ")");
  const auto type = config["model_type"].get<std::string>();
  if (type == "gpt2") {
    auto c = Gpt2Config::from_json(config, source);
    return make(type, c, static_cast<Gpt2LMHeadModel*>(nullptr), "fsdpp::models::Gpt2BlockImpl",
                CausalLmLimits{c.vocab_size, c.n_positions});
  }
  if (type == "opt") {
    auto c = OptConfig::from_json(config, source);
    return make(type, c, static_cast<OptForCausalLM*>(nullptr), "fsdpp::models::OptLayerImpl",
                CausalLmLimits{c.vocab_size, c.max_position_embeddings});
  }
  if (type == "falcon") {
    auto c = FalconConfig::from_json(config, source);
    return make(type, c, static_cast<FalconForCausalLM*>(nullptr), "fsdpp::models::FalconDecoderLayerImpl",
                CausalLmLimits{c.vocab_size, c.max_position_embeddings});
  }
  const auto& llama_types = llama_model_types();
  if (type == "phi") {  // LlamaConfig's reader, Phi's own blocks
    auto c = LlamaConfig::from_json(config, source);
    return make(type, c, static_cast<PhiForCausalLM*>(nullptr), "fsdpp::models::PhiDecoderLayerImpl",
                CausalLmLimits{c.vocab_size, c.max_position_embeddings});
  }
  if (std::find(llama_types.begin(), llama_types.end(), type) != llama_types.end()) {
    auto c = LlamaConfig::from_json(config, source);
    return make(type, c, static_cast<LlamaForCausalLM*>(nullptr), "fsdpp::models::LlamaDecoderLayerImpl",
                CausalLmLimits{c.vocab_size, c.max_position_embeddings});
  }
  throw std::invalid_argument(source + ": unknown model_type '" + type + "' (expected one of " + type_list() + ")");
}

}  // namespace

CausalLm build_causal_lm(const nlohmann::json& config, const std::string& source) {
  return parse_causal_lm_config(config, source).build();
}

CausalLmConfig parse_causal_lm_config(const nlohmann::json& config, const std::string& source) {
  return dispatch(config, source,
                  [](const std::string& type, const auto& c, auto* holder, const char* block, CausalLmLimits limits) {
                    using Holder = std::remove_pointer_t<decltype(holder)>;
                    bool auxiliary_loss = false;
                    if constexpr (std::is_same_v<std::decay_t<decltype(c)>, LlamaConfig>)
                      auxiliary_loss = c.output_router_logits && c.num_experts > 0;
                    return CausalLmConfig{type, limits, auxiliary_loss, [type, c, block, limits] {
                                            return make_lm<Holder>(type, c, block, limits.vocab_size,
                                                                   limits.max_positions);
                                          }};
                  });
}

CausalLmLimits causal_lm_limits(const nlohmann::json& config, const std::string& source) {
  return dispatch(config, source,
                  [](const std::string&, const auto&, auto*, const char*, CausalLmLimits limits) { return limits; });
}

}  // namespace fsdpp::models
