// A causal language model of any supported family, built from a Hugging Face config.json
// object: what `fsdpp generate`, `fsdpp eval` and training need without knowing the family.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fsdpp::models {

// The implicit special members copy strings, a json and a std::function; only running out of
// memory makes them throw, which clang-tidy cannot rule out.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct CausalLm {
  std::string model_type;                                     // one of supported_model_types()
  std::shared_ptr<torch::nn::Module> module;                  // HF-named parameters
  std::function<torch::Tensor(const torch::Tensor&)> logits;  // [b, s] int64 -> [b, s, vocab], through nn::call
  std::string block_type;  // Module::name() of a transformer block (for wrap policies)
  int64_t vocab_size = 0;
  int64_t max_positions = 0;
  // Parameters used data-dependently (a mixture of experts' experts): ranks of one step may
  // differ in which got a gradient (fsdp::FsdpOptions::gradients_may_differ_across_ranks).
  bool data_dependent_parameters = false;
  // Null unless the config asks for an auxiliary training loss (a mixture of experts'
  // load balancing, output_router_logits): that loss of the last forward pass run with
  // gradients on, already weighted (router_aux_loss_coef), a scalar that training adds to
  // the micro-batch's mean cross-entropy. Evaluation does not add it.
  std::function<torch::Tensor()> auxiliary_loss;
  nlohmann::json config;  // as written to config.json
};

// Supported model_type values: gpt2, opt, llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3,
// phi, mixtral, qwen3_moe, falcon.
// Throws std::invalid_argument naming `source` and the model_type for anything else.
CausalLm build_causal_lm(const nlohmann::json& config, const std::string& source);
const std::vector<std::string>& supported_model_types();

// What a config allows without building the model: vocabulary size and positions.
// Same validation and errors as build_causal_lm.
struct CausalLmLimits {
  int64_t vocab_size = 0;
  int64_t max_positions = 0;
};
CausalLmLimits causal_lm_limits(const nlohmann::json& config, const std::string& source);

// A config checked and parsed once (into its family's typed config), for a caller that
// needs both its limits and the model, or the model more than once, without parsing the
// JSON again. Same validation and errors as build_causal_lm; build() is build_causal_lm
// of the same config, and never fails on it.
struct CausalLmConfig {
  std::string model_type;
  CausalLmLimits limits;
  bool auxiliary_loss = false;  // whether build()'s CausalLm has an auxiliary_loss
  std::function<CausalLm()> build;
};
CausalLmConfig parse_causal_lm_config(const nlohmann::json& config, const std::string& source);

}  // namespace fsdpp::models
