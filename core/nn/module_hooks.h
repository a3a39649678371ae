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
#include <torch/nn/modules/linear.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/nn/checkpoint.h"
#include "core/nn/gradient_only_linear.h"

namespace fsdpp::nn {

struct ForwardHooks {
  // The call's tensor arguments, the first input first and then each further tensor
  // argument in order; may replace any of them.
  std::function<void(std::vector<at::Tensor>& inputs)> pre;
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

template <class T>
constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, at::Tensor>;

template <class T>
void append_tensor(std::vector<at::Tensor>& out, const T& arg) {
  if constexpr (is_tensor_v<T>) out.push_back(arg);
}

// An argument of type E (a reference type) with its tensor, if it is one, taken from a list.
template <class E>
using Replaced = std::conditional_t<is_tensor_v<E>, at::Tensor, E>;
template <class E>
Replaced<E> take(E&& arg, const std::vector<at::Tensor>& tensors, size_t& next) {
  if constexpr (is_tensor_v<E>) {
    return tensors.at(next++);
  } else {
    return std::forward<E>(arg);
  }
}

// `args` with each tensor argument replaced, in order, by tensors[next], tensors[next + 1], ...
// (a braced list evaluates left to right).
template <class... E>
std::tuple<Replaced<E>...> replace_tensors(std::tuple<E...>&& args, const std::vector<at::Tensor>& tensors,
                                           size_t next) {
  return std::apply(
      [&](auto&&... a) { return std::tuple<Replaced<E>...>{take<E>(std::forward<E>(a), tensors, next)...}; },
      std::move(args));
}

template <class Impl, class... Rest>
at::Tensor call_with_hooks(Impl& module, at::Tensor x, Rest&&... rest) {
  auto hooks = forward_hooks(&module);
  at::Tensor y;
  if (hooks && hooks->pre) {
    std::vector<at::Tensor> inputs;
    inputs.reserve(1 + sizeof...(Rest));
    inputs.push_back(std::move(x));
    (append_tensor(inputs, rest), ...);
    hooks->pre(inputs);
    y = std::apply([&](auto&&... a) { return module.forward(inputs[0], std::forward<decltype(a)>(a)...); },
                   replace_tensors(std::forward_as_tuple(std::forward<Rest>(rest)...), inputs, 1));
  } else {
    y = module.forward(std::move(x), std::forward<Rest>(rest)...);
  }
  if (hooks && hooks->post) y = hooks->post(y);
  return y;
}

// call_impl without counting the call. A checkpointed call's tensor arguments are all
// inputs of its checkpoint, so each gets its gradient through the recomputation.
template <class Impl, class... Rest>
at::Tensor call_counted(Impl& module, at::Tensor x, Rest&&... rest) {
  if (c10::GradMode::is_enabled() && is_checkpointed(&module)) {
    std::vector<at::Tensor> inputs;
    inputs.reserve(1 + sizeof...(Rest));
    inputs.push_back(std::move(x));
    (append_tensor(inputs, rest), ...);
    auto fn = [&module, args = std::make_tuple(std::decay_t<Rest>(rest)...)](std::vector<at::Tensor> in) mutable {
      return std::apply(
          [&](auto&... a) {
            return std::apply(
                [&](auto&&... b) { return call_with_hooks(module, in[0], std::forward<decltype(b)>(b)...); },
                replace_tensors(std::forward_as_tuple(a...), in, 1));
          },
          args);
    };
    return checkpoint(std::move(fn), std::move(inputs));
  }
  return call_with_hooks(module, std::move(x), std::forward<Rest>(rest)...);
}

// Conv1D-like modules provide `gradient_only_forward(x)`; torch::nn::Linear is known here.
template <class Impl, class = void>
struct has_gradient_only_forward : std::false_type {};
template <class Impl>
struct has_gradient_only_forward<
    Impl, std::void_t<decltype(std::declval<Impl&>().gradient_only_forward(std::declval<const at::Tensor&>()))>>
    : std::true_type {};

template <class Impl>
at::Tensor gradient_only_forward(Impl& module, const at::Tensor& x) {
  if constexpr (std::is_base_of_v<torch::nn::LinearImpl, Impl>) {
    return gradient_only_linear(x, module.weight, module.bias, WeightLayout::OutIn);
  } else {
    static_assert(has_gradient_only_forward<Impl>::value,
                  "nn::call_summed: the module is neither a torch::nn::Linear nor has gradient_only_forward(x)");
    return module.gradient_only_forward(x);
  }
}

}  // namespace detail

// Runs module.forward(x, rest...) between the module's hooks (in a checkpoint if marked).
template <class Impl, class... Rest>
at::Tensor call_impl(Impl& module, at::Tensor x, Rest&&... rest) {
  count_module_call();
  return detail::call_counted(module, std::move(x), std::forward<Rest>(rest)...);
}

// The same through a module holder (TORCH_MODULE types): nn::call(block, x).
template <class Holder, class... Rest>
at::Tensor call(Holder& module, at::Tensor x, Rest&&... rest) {
  return call_impl(*module, std::move(x), std::forward<Rest>(rest)...);
}

// nn::call of a linear layer (torch::nn::Linear, or a module with gradient_only_forward)
// whose output the caller only sums into what it returns: a residual branch's last
// projection, `return x + nn::call_summed(down_proj, h)`, through every caller up to the
// checkpointed block. No op then saves the output's value for backward. When the call is
// the last module call of a checkpoint's recomputation, it skips the value (the matmul)
// and keeps the backward: nn::gradient_only_linear, between the module's hooks. Anywhere
// else, or where that declines the inputs, it is nn::call. A caller that does read the
// value gets NaN, never a wrong number. Module calls after it (a post-norm) make it not
// the last, so the claim is only about the plain ops between it and the block's end.
// nn::set_recompute_skips_summed(false) turns the skipping off.
template <class Holder>
at::Tensor call_summed(Holder& module, at::Tensor x) {
  auto& impl = *module;
  if (count_module_call() && recompute_skips_summed() && !is_checkpointed(&impl)) {
    auto hooks = forward_hooks(&impl);
    if (hooks && hooks->pre) {
      std::vector<at::Tensor> inputs{std::move(x)};
      hooks->pre(inputs);
      x = inputs[0];
    }
    at::Tensor y = detail::gradient_only_forward(impl, x);
    if (y.defined())
      record_call_without_value();
    else
      y = impl.forward(x);
    if (hooks && hooks->post) y = hooks->post(y);
    return y;
  }
  return detail::call_counted(impl, std::move(x));
}

}  // namespace fsdpp::nn
