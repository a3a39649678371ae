#include "core/nn/unique_parameters.h"

#include <unordered_map>

namespace fsdpp::nn {

namespace {

// The module's named_parameters as pairs: a tied weight under each of its names.
NamedParameters listed(const torch::nn::Module& module) {
  NamedParameters named;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) named.emplace_back(item.key(), item.value());
  return named;
}

}  // namespace

std::vector<UniqueParameter> unique_parameters(const NamedParameters& named) {
  std::unordered_map<const c10::TensorImpl*, size_t> index_of;
  std::vector<UniqueParameter> unique;
  for (const auto& [name, tensor] : named) {
    auto [it, fresh] = index_of.emplace(tensor.unsafeGetTensorImpl(), unique.size());
    if (fresh) unique.push_back({name, tensor, {}});
    unique[it->second].aliases.push_back(name);
  }
  return unique;
}

std::vector<UniqueParameter> unique_parameters(const torch::nn::Module& module) {
  return unique_parameters(listed(module));
}

NamedParameters unique_named_parameters(const NamedParameters& named) {
  NamedParameters out;
  for (auto& p : unique_parameters(named)) out.emplace_back(std::move(p.name), std::move(p.tensor));
  return out;
}

NamedParameters unique_named_parameters(const torch::nn::Module& module) {
  return unique_named_parameters(listed(module));
}

}  // namespace fsdpp::nn
