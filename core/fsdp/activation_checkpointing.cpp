#include "core/fsdp/activation_checkpointing.h"

#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>

#include <algorithm>
#include <stdexcept>

#include "core/nn/module_hooks.h"

namespace fsdpp::fsdp {

std::vector<std::string> apply_activation_checkpointing(torch::nn::Module& root, const CheckpointPolicy& policy) {
  if (policy.every_k < 1)
    throw std::invalid_argument("activation checkpointing: every_k must be >= 1, got " +
                                std::to_string(policy.every_k));
  if (policy.module_types.empty())
    throw std::invalid_argument("activation checkpointing: module_types is empty; name at least one module type");
  const auto& types = policy.module_types;
  std::vector<std::string> marked;
  int matches = 0;
  for (const auto& item : root.named_modules("", /*include_self=*/true)) {
    const auto& module = item.value();
    if (dynamic_cast<const torch::nn::ModuleListImpl*>(module.get()) ||
        dynamic_cast<const torch::nn::ModuleDictImpl*>(module.get()))
      continue;
    if (std::find(types.begin(), types.end(), module->name()) == types.end()) continue;
    if (++matches % policy.every_k != 0) continue;
    nn::set_checkpointed(module, true);
    marked.push_back(item.key());
  }
  if (matches == 0) {
    std::string listed;
    for (const auto& t : types) listed += (listed.empty() ? "" : ", ") + t;
    throw std::invalid_argument("activation checkpointing: no module of type " + listed + " in the model");
  }
  return marked;
}

void remove_activation_checkpointing(torch::nn::Module& root) {
  for (const auto& item : root.named_modules("", /*include_self=*/true)) nn::set_checkpointed(item.value(), false);
}

}  // namespace fsdpp::fsdp
