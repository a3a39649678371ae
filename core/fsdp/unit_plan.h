// Which parameters each FSDP unit manages: the unit structure ShardedModel::create builds,
// computed from a module tree alone (no communicator, no values), so that a planner can
// read the exact units of a model built on the meta device.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "core/fsdp/wrap_policy.h"

namespace fsdpp::fsdp {

// One unit to be: the module it wraps and the parameters it manages, by first name.
struct UnitPlan {
  std::string name;  // the module's path; "" for the root
  const torch::nn::Module* module = nullptr;
  std::vector<std::pair<std::string, at::Tensor>> params;
  bool is_root = false;
};

// Children first, the root last. A module the policy wraps takes the parameters of its
// subtree that no wrapped descendant took and that nothing outside the subtree uses (a
// tied weight belongs to the closest wrapped ancestor of all its users); the root takes
// the rest. ModuleList and ModuleDict are never units. Reads only names, shapes and
// tensor identities.
std::vector<UnitPlan> plan_units(const torch::nn::Module& root, const WrapPolicy& policy);

}  // namespace fsdpp::fsdp
