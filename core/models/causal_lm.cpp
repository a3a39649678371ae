#include "core/models/causal_lm.h"

#include <stdexcept>

#include "core/models/families.h"

namespace fsdpp::models {

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> all;
    for (const auto& family : families()) all.insert(all.end(), family.model_types.begin(), family.model_types.end());
    return all;
  }();
  return types;
}

CausalLm build_causal_lm(const nlohmann::json& config, const std::string& source) {
  return parse_causal_lm_config(config, source).build();
}

CausalLmConfig parse_causal_lm_config(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) throw std::invalid_argument(source + ": expected a JSON object");
  if (!config.contains("model_type") || !config["model_type"].is_string())
    throw std::invalid_argument(source + ": key 'model_type' is missing (expected one of " + model_type_list() + ")");
  return family_of(config["model_type"].get<std::string>(), source).read(config, source);
}

CausalLmLimits causal_lm_limits(const nlohmann::json& config, const std::string& source) {
  return parse_causal_lm_config(config, source).limits;
}

}  // namespace fsdpp::models
