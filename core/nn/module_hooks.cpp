#include "core/nn/module_hooks.h"

#include <mutex>
#include <unordered_map>

namespace fsdpp::nn {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::unordered_map<const torch::nn::Module*, std::shared_ptr<const ForwardHooks>>& registry() {
  static std::unordered_map<const torch::nn::Module*, std::shared_ptr<const ForwardHooks>> hooks;
  return hooks;
}

}  // namespace

void set_forward_hooks(const torch::nn::Module* module, ForwardHooks hooks) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[module] = std::make_shared<const ForwardHooks>(std::move(hooks));
}

void clear_forward_hooks(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(module);
}

std::shared_ptr<const ForwardHooks> forward_hooks(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(module);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace fsdpp::nn
