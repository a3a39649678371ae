#include "core/models/families.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "core/models/falcon.h"
#include "core/models/gpt2.h"
#include "core/models/llama.h"
#include "core/models/opt.h"
#include "core/models/phi.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {
namespace {

// What a config allows without building its model.
CausalLmLimits limits_of(const Gpt2Config& c) { return {c.vocab_size, c.n_positions}; }
CausalLmLimits limits_of(const OptConfig& c) { return {c.vocab_size, c.max_position_embeddings}; }
CausalLmLimits limits_of(const LlamaConfig& c) { return {c.vocab_size, c.max_position_embeddings}; }
CausalLmLimits limits_of(const FalconConfig& c) { return {c.vocab_size, c.max_position_embeddings}; }

bool has_auxiliary_loss(const LlamaConfig& c) { return c.has_auxiliary_loss(); }
template <class Config>
bool has_auxiliary_loss(const Config&) {
  return false;
}

template <class Holder, class Config>
CausalLm make_lm(const std::string& type, const Config& c, const std::string& unit) {
  Holder model(c);
  CausalLm lm;
  lm.model_type = type;
  lm.module = model.ptr();
  lm.logits = [model](const torch::Tensor& tokens) mutable { return nn::call(model, tokens); };
  lm.block_type = unit;
  const auto limits = limits_of(c);
  lm.vocab_size = limits.vocab_size;
  lm.max_positions = limits.max_positions;
  lm.config = c.to_json();
  lm.config["model_type"] = type;
  if constexpr (std::is_same_v<Config, LlamaConfig>) {
    lm.data_dependent_parameters = c.num_experts > 0;
    if constexpr (std::is_same_v<Holder, LlamaForCausalLM>)
      if (c.has_auxiliary_loss()) lm.auxiliary_loss = [model] { return model->auxiliary_loss(); };
  }
  return lm;
}

// A row whose reader is Config::from_json and whose model is Holder(config).
template <class Config, class Holder>
Family family_row(std::string name, std::vector<std::string> model_types, std::string unit,
                  std::vector<UnreadTensor> unread_tensors) {
  auto read = [unit](const nlohmann::json& json, const std::string& source) {
    const auto c = Config::from_json(json, source);
    const auto type = json.at("model_type").get<std::string>();
    return CausalLmConfig{type, limits_of(c), has_auxiliary_loss(c),
                          [type, c, unit] { return make_lm<Holder>(type, c, unit); }};
  };
  return Family{std::move(name), std::move(model_types), std::move(unit), std::move(read), std::move(unread_tensors)};
}

const UnreadTensor kRotaryInverseFrequencies{
    ".rotary_emb.inv_freq",
    "the rotary inverse frequencies older transformers saved; both compute them from the rope settings"};

}  // namespace

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      family_row<Gpt2Config, Gpt2LMHeadModel>(
          "GPT-2", {"gpt2"}, "fsdpp::models::Gpt2BlockImpl",
          {{".attn.bias", "GPT-2's causal mask (a constant), in the original checkpoints"},
           {".attn.masked_bias", "GPT-2's masking constant, in the original checkpoints"}}),
      family_row<OptConfig, OptForCausalLM>("OPT", {"opt"}, "fsdpp::models::OptLayerImpl", {}),
      // Llama's blocks with each family's options (llama.h): q/k/v biases, q/k norms,
      // Gemma's norms, caps and windows, Phi-3's fused tensors, sparse experts.
      family_row<LlamaConfig, LlamaForCausalLM>(
          "Llama-like", {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "mixtral", "qwen3_moe"},
          "fsdpp::models::LlamaDecoderLayerImpl", {kRotaryInverseFrequencies}),
      // Phi-1/1.5/2: LlamaConfig's reader, its own parallel blocks (phi.h).
      family_row<LlamaConfig, PhiForCausalLM>("Phi", {"phi"}, "fsdpp::models::PhiDecoderLayerImpl",
                                              {kRotaryInverseFrequencies}),
      family_row<FalconConfig, FalconForCausalLM>("Falcon", {"falcon"}, "fsdpp::models::FalconDecoderLayerImpl",
                                                  {kRotaryInverseFrequencies}),
  };
  return table;
}

const Family& family_of(const std::string& model_type, const std::string& source) {
  for (const auto& family : families()) {
    const auto& types = family.model_types;
    if (std::find(types.begin(), types.end(), model_type) != types.end()) return family;
  }
  throw std::invalid_argument(source + ": unknown model_type '" + model_type + "' (expected one of " +
                              model_type_list() + ")");
}

std::string model_type_list() {
  std::string list;
  for (const auto& type : supported_model_types()) list += (list.empty() ? "" : ", ") + type;
  return list;
}

}  // namespace fsdpp::models
