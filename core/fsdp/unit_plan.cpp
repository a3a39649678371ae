#include "core/fsdp/unit_plan.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace fsdpp::fsdp {

std::vector<UnitPlan> plan_units(const torch::nn::Module& root, const WrapPolicy& policy) {
  // Names and reference counts of every parameter object (tied weights appear twice).
  std::unordered_map<const c10::TensorImpl*, std::string> name_of;
  std::unordered_map<const c10::TensorImpl*, int> total_refs;
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    auto* impl = item.value().unsafeGetTensorImpl();
    if (!name_of.count(impl)) name_of[impl] = item.key();
    total_refs[impl] += 1;
  }
  std::unordered_set<const c10::TensorImpl*> assigned;

  // Parameters of `module`'s subtree that no wrapped descendant took and that are not
  // also used outside the subtree, in model order.
  auto unit_params = [&](const torch::nn::Module& module, bool is_root) {
    std::unordered_map<const c10::TensorImpl*, int> refs;
    auto named = module.named_parameters(/*recurse=*/true);
    for (const auto& item : named) refs[item.value().unsafeGetTensorImpl()] += 1;
    std::vector<std::pair<std::string, at::Tensor>> out;
    std::unordered_set<const c10::TensorImpl*> seen;
    for (const auto& item : named) {
      auto* impl = item.value().unsafeGetTensorImpl();
      if (assigned.count(impl) || seen.count(impl)) continue;
      if (!is_root && refs[impl] != total_refs[impl]) continue;  // shared with outside: belongs higher up
      seen.insert(impl);
      out.emplace_back(name_of[impl], item.value());
    }
    return out;
  };
  std::vector<UnitPlan> plans;
  auto add_unit = [&](const std::string& name, const torch::nn::Module& module, bool is_root) {
    UnitPlan plan{name, &module, unit_params(module, is_root), is_root};
    for (auto& p : plan.params) assigned.insert(p.second.unsafeGetTensorImpl());
    plans.push_back(std::move(plan));
  };

  auto modules = root.named_modules("", /*include_self=*/false);
  for (auto it = modules.items().rbegin(); it != modules.items().rend(); ++it) {  // children first
    const std::string& name = it->key();
    const auto& module = it->value();
    // Containers are iterated, never called, so their hooks would never run; like FSDP1's
    // EXCLUDE_WRAP_MODULES, no policy wraps them.
    if (dynamic_cast<const torch::nn::ModuleListImpl*>(module.get()) ||
        dynamic_cast<const torch::nn::ModuleDictImpl*>(module.get()))
      continue;
    int64_t numel = 0;
    for (auto& p : unit_params(*module, false)) numel += p.second.numel();
    if (numel > 0 && policy(WrapCandidate{name, *module, numel})) add_unit(name, *module, false);
  }
  add_unit("", root, true);
  return plans;
}

}  // namespace fsdpp::fsdp
