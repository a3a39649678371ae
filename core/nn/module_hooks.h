// Forward hooks for LibTorch C++ modules, which have none of their own.
//
// A model calls a submodule that may be wrapped (e.g. a transformer block) through
// nn::call(block, x, ...) instead of block->forward(x, ...): the call runs the hooks
// registered for that module object around its forward, like PyTorch's __call__ runs
// forward pre/post hooks. Models stay unaware of what the hooks do (FSDP registers them).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>

namespace fsdpp::nn {

struct ForwardHooks {
  std::function<at::Tensor(at::Tensor)> pre;   // may replace the first input
  std::function<at::Tensor(at::Tensor)> post;  // may replace the output
};

// Registers (replaces) the hooks for one module object. Thread-safe.
void set_forward_hooks(const torch::nn::Module* module, ForwardHooks hooks);
void clear_forward_hooks(const torch::nn::Module* module);
// The module's hooks, or nullptr.
std::shared_ptr<const ForwardHooks> forward_hooks(const torch::nn::Module* module);

// Runs module.forward(x, rest...) between the module's hooks.
template <class Impl, class... Rest>
at::Tensor call_impl(Impl& module, at::Tensor x, Rest&&... rest) {
  auto hooks = forward_hooks(&module);
  if (hooks && hooks->pre) x = hooks->pre(x);
  at::Tensor y = module.forward(x, std::forward<Rest>(rest)...);
  if (hooks && hooks->post) y = hooks->post(y);
  return y;
}

// The same through a module holder (TORCH_MODULE types): nn::call(block, x).
template <class Holder, class... Rest>
at::Tensor call(Holder& module, at::Tensor x, Rest&&... rest) {
  return call_impl(*module, std::move(x), std::forward<Rest>(rest)...);
}

}  // namespace fsdpp::nn
