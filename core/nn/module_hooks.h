// Forward hooks for LibTorch C++ modules, which have none of their own.
//
// A model calls a submodule that may be wrapped (e.g. a transformer block) through
// nn::call(block, x, ...) instead of block->forward(x, ...): the call runs the hooks
// registered for that module object around its forward, like PyTorch's __call__ runs
// forward pre/post hooks. Models stay unaware of what the hooks do (FSDP registers them).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "core/nn/checkpoint.h"

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

// Marks (true) or unmarks one module object for activation checkpointing: while grad
// mode is on, nn::call runs its hooks and forward inside nn::checkpoint, so that backward
// reruns both (FSDP's hooks re-all-gather a resharded unit). The mark lapses when the
// module object dies. Thread-safe.
void set_checkpointed(const std::shared_ptr<const torch::nn::Module>& module, bool checkpointed);
bool is_checkpointed(const torch::nn::Module* module);

namespace detail {

template <class Impl, class... Rest>
at::Tensor call_with_hooks(Impl& module, at::Tensor x, Rest&&... rest) {
  auto hooks = forward_hooks(&module);
  if (hooks && hooks->pre) x = hooks->pre(x);
  at::Tensor y = module.forward(x, std::forward<Rest>(rest)...);
  if (hooks && hooks->post) y = hooks->post(y);
  return y;
}

// A checkpointed call's other arguments are kept for the recomputation, which cannot
// send a gradient back to them (see nn::checkpoint).
inline void check_checkpointed_arg(const at::Tensor& t) {
  if (t.defined() && t.requires_grad())
    throw std::invalid_argument(
        "nn::call of a checkpointed module: only the first argument may require grad, another one does");
}
template <class T>
void check_checkpointed_arg(const T&) {}

}  // namespace detail

// Runs module.forward(x, rest...) between the module's hooks (in a checkpoint if marked).
template <class Impl, class... Rest>
at::Tensor call_impl(Impl& module, at::Tensor x, Rest&&... rest) {
  if (c10::GradMode::is_enabled() && is_checkpointed(&module)) {
    (detail::check_checkpointed_arg(rest), ...);
    auto fn = [&module, args = std::make_tuple(std::decay_t<Rest>(rest)...)](at::Tensor in) mutable {
      return std::apply([&](auto&... a) { return detail::call_with_hooks(module, std::move(in), a...); }, args);
    };
    return checkpoint(std::move(fn), std::move(x));
  }
  return detail::call_with_hooks(module, std::move(x), std::forward<Rest>(rest)...);
}

// The same through a module holder (TORCH_MODULE types): nn::call(block, x).
template <class Holder, class... Rest>
at::Tensor call(Holder& module, at::Tensor x, Rest&&... rest) {
  return call_impl(*module, std::move(x), std::forward<Rest>(rest)...);
}

}  // namespace fsdpp::nn
