// Which submodules become their own FSDP unit (the rest stay in their parent's unit,
// ultimately the root's). Decided bottom-up, children before parents. Only modules that
// the model calls through nn::call can be units; ModuleList and ModuleDict never are.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <string>
#include <vector>

namespace fsdpp::fsdp {

struct WrapCandidate {
  const std::string& qualified_name;  // e.g. "blocks.2" ("" for the root)
  const torch::nn::Module& module;
  int64_t unwrapped_numel;  // its parameters not already in a wrapped descendant
};

using WrapPolicy = std::function<bool(const WrapCandidate&)>;

// Modules whose type name (Module::name(), e.g. "fsdpp::models::TinyBlockImpl") is listed,
// like FSDP's transformer_auto_wrap_policy / ModuleWrapPolicy.
WrapPolicy wrap_by_module_type(std::vector<std::string> type_names);
// Modules holding at least min_num_params unwrapped parameters, like FSDP1's
// size_based_auto_wrap_policy(min_num_params).
WrapPolicy wrap_by_min_params(int64_t min_num_params);
// Any predicate; for completeness and symmetry with the two above.
WrapPolicy wrap_by_predicate(std::function<bool(const WrapCandidate&)> predicate);
// Nothing but the root.
WrapPolicy wrap_nothing();

}  // namespace fsdpp::fsdp
