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

// Checkpoint marks: the object's address, and a weak reference that tells whether the
// object at that address is still the one marked (addresses are reused).
std::unordered_map<const torch::nn::Module*, std::weak_ptr<const torch::nn::Module>>& checkpointed() {
  static std::unordered_map<const torch::nn::Module*, std::weak_ptr<const torch::nn::Module>> marks;
  return marks;
}

}  // namespace

void set_checkpointed(const std::shared_ptr<const torch::nn::Module>& module, bool checkpointed_now) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (checkpointed_now)
    checkpointed()[module.get()] = module;
  else
    checkpointed().erase(module.get());
}

bool is_checkpointed(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = checkpointed().find(module);
  if (it == checkpointed().end()) return false;
  if (it->second.expired()) {
    checkpointed().erase(it);
    return false;
  }
  return true;
}

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
