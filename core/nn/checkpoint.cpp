#include "core/nn/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/compat/torch_compat.h"

namespace fsdpp::nn {
namespace {

// Per thread: LibTorch's CPU autograd engine runs a backward (nested ones included) on
// the thread that called it, and hooks run on the thread of the forward or backward.
thread_local int checkpointed_forward_depth = 0;
thread_local int recompute_depth = 0;

// The module calls of the innermost checkpointed forward or recomputation on this thread:
// how many it has made, and (recomputation only) how many its forward made, else -1.
struct ModuleCalls {
  int64_t made = 0;
  int64_t expected = -1;
};
thread_local ModuleCalls* current_module_calls = nullptr;

// The side outputs (side_output) of the innermost checkpointed forward or recomputation
// on this thread, in the order fn produced them.
struct SideOutputs {
  bool recomputing = false;
  std::vector<at::Tensor> values;
  std::vector<std::function<void(at::Tensor)>> deliveries;  // forward only
};
thread_local SideOutputs* current_side_outputs = nullptr;

struct SideOutputScope {
  explicit SideOutputScope(SideOutputs& outputs) : previous_(current_side_outputs) { current_side_outputs = &outputs; }
  ~SideOutputScope() { current_side_outputs = previous_; }
  SideOutputScope(const SideOutputScope&) = delete;
  SideOutputScope& operator=(const SideOutputScope&) = delete;
  SideOutputs* previous_;
};

std::atomic<int64_t> calls_without_value_total{0};
std::atomic<bool> skips_summed{true};

// Makes `calls` the innermost count while alive.
struct ModuleCallScope {
  explicit ModuleCallScope(ModuleCalls& calls) : previous_(current_module_calls) { current_module_calls = &calls; }
  ~ModuleCallScope() { current_module_calls = previous_; }
  ModuleCallScope(const ModuleCallScope&) = delete;
  ModuleCallScope& operator=(const ModuleCallScope&) = delete;
  ModuleCalls* previous_;
};

struct DepthScope {
  explicit DepthScope(int& depth) : depth_(depth) { ++depth_; }
  ~DepthScope() { --depth_; }
  DepthScope(const DepthScope&) = delete;
  DepthScope& operator=(const DepthScope&) = delete;
  int& depth_;
};

// The function to recompute, held by the autograd node (saved_data holds IValues, so it
// travels as a capsule).
struct Recompute : torch::CustomClassHolder {
  Recompute(std::function<at::Tensor(std::vector<at::Tensor>)> f, compat::AutocastState a)
      : fn(std::move(f)), autocast(a) {}
  std::function<at::Tensor(std::vector<at::Tensor>)> fn;
  std::vector<bool> requires_grad;  // per input, at the forward
  // The forward's autocast: the backward runs without one (on CUDA, on the engine's device
  // thread), and the recomputation must cast as the forward did, as torch.utils.checkpoint
  // re-enters the forward's torch.autocast.
  compat::AutocastState autocast;
  int64_t module_calls = -1;  // made by the forward
  // The forward's side outputs' deliveries, made by checkpoint() once the node exists.
  std::vector<std::function<void(at::Tensor)>> deliveries;
};

// Inputs: fn's inputs, the anchor, the function. Autograd creates no node for a call none
// of whose tensor inputs requires grad; the anchor (an empty tensor that requires grad when
// no input does) makes the node exist anyway, so that the parameters inside fn get
// gradients when the input is token ids or a constant. It receives no gradient.
// Outputs: y = fn(x), then fn's side outputs in the order fn produced them.
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                at::Tensor anchor, c10::intrusive_ptr<Recompute> recompute) {
    ctx->save_for_backward(inputs.vec());
    for (const auto& input : inputs) recompute->requires_grad.push_back(input.requires_grad());
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(recompute);
    // Function::apply has turned grad mode off: fn records no graph, saves nothing.
    DepthScope scope(checkpointed_forward_depth);
    ModuleCalls calls;
    ModuleCallScope call_scope(calls);
    SideOutputs sides;
    SideOutputScope side_scope(sides);
    torch::autograd::variable_list outputs = {recompute->fn(inputs.vec())};
    recompute->module_calls = calls.made;
    recompute->deliveries = std::move(sides.deliveries);
    outputs.insert(outputs.end(), sides.values.begin(), sides.values.end());
    return outputs;
  }

  // Recomputes y = fn(inputs) on detached copies of the inputs, then backpropagates the
  // gradients of y and of the side outputs through it with a nested backward (which
  // accumulates the parameters' .grad, and the inputs').
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto recompute = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    std::vector<at::Tensor> inputs;
    for (const auto& saved : ctx->get_saved_variables()) inputs.push_back(saved.detach());
    for (size_t i = 0; i < inputs.size(); ++i)
      if (recompute->requires_grad[i]) inputs[i].requires_grad_(true);
    torch::autograd::variable_list recomputed;
    {
      at::AutoGradMode grad_mode(true);  // the engine runs backward with grad mode off
      compat::AutocastGuard autocast(recompute->autocast);
      DepthScope scope(recompute_depth);
      ModuleCalls calls{0, recompute->module_calls};
      ModuleCallScope call_scope(calls);
      SideOutputs sides;
      sides.recomputing = true;
      SideOutputScope side_scope(sides);
      recomputed = {recompute->fn(inputs)};
      recomputed.insert(recomputed.end(), sides.values.begin(), sides.values.end());
    }
    if (recomputed.size() != grad_outputs.size())
      throw std::logic_error("nn::checkpoint: the recomputation made " + std::to_string(recomputed.size() - 1) +
                             " side outputs, its forward " + std::to_string(grad_outputs.size() - 1));
    torch::autograd::variable_list roots, grads;
    for (size_t i = 0; i < recomputed.size(); ++i)
      if (recomputed[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(recomputed[i]);
        grads.push_back(grad_outputs[i]);
      }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    torch::autograd::variable_list input_grads;
    for (size_t i = 0; i < inputs.size(); ++i)
      input_grads.push_back(recompute->requires_grad[i] ? inputs[i].grad() : at::Tensor());
    input_grads.emplace_back();  // the anchor
    input_grads.emplace_back();  // the function
    return input_grads;
  }
};

}  // namespace

at::Tensor checkpoint(std::function<at::Tensor(at::Tensor)> fn, at::Tensor x) {
  if (!at::GradMode::is_enabled()) return fn(std::move(x));
  return checkpoint([fn = std::move(fn)](std::vector<at::Tensor> in) { return fn(std::move(in[0])); },
                    std::vector<at::Tensor>{std::move(x)});
}

at::Tensor checkpoint(std::function<at::Tensor(std::vector<at::Tensor>)> fn, std::vector<at::Tensor> inputs) {
  if (!at::GradMode::is_enabled()) return fn(std::move(inputs));
  bool any_requires_grad = false;
  for (const auto& input : inputs) any_requires_grad = any_requires_grad || input.requires_grad();
  at::Tensor anchor = at::empty({0}, at::TensorOptions().dtype(at::kFloat)).requires_grad_(!any_requires_grad);
  auto recompute = c10::make_intrusive<Recompute>(std::move(fn), compat::autocast_state());
  auto outputs = CheckpointFunction::apply(at::TensorList(inputs), std::move(anchor), recompute);
  auto deliveries = std::move(recompute->deliveries);
  // Through side_output: a checkpoint inside another's recomputation hands them to it.
  for (size_t i = 0; i < deliveries.size(); ++i) side_output(outputs[i + 1], deliveries[i]);
  return outputs[0];
}

void side_output(const at::Tensor& t, const std::function<void(at::Tensor)>& deliver) {
  if (current_side_outputs == nullptr) {
    deliver(t);
    return;
  }
  current_side_outputs->values.push_back(t);
  if (!current_side_outputs->recomputing) current_side_outputs->deliveries.push_back(deliver);
}

bool in_checkpointed_forward() { return checkpointed_forward_depth > 0; }
bool recomputing() { return recompute_depth > 0; }

bool count_module_call() {
  if (current_module_calls == nullptr) return false;
  ++current_module_calls->made;
  return current_module_calls->made == current_module_calls->expected;
}

void set_recompute_skips_summed(bool skips) { skips_summed.store(skips); }
bool recompute_skips_summed() { return skips_summed.load(); }

void record_call_without_value() { calls_without_value_total.fetch_add(1, std::memory_order_relaxed); }
int64_t calls_without_value() { return calls_without_value_total.load(std::memory_order_relaxed); }

}  // namespace fsdpp::nn
