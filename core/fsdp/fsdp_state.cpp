#include "core/fsdp/fsdp_state.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <stdexcept>

#include "core/nn/checkpoint.h"
#include "core/runtime/device.h"

namespace fsdpp::fsdp {

namespace {

// Identity in forward over every input of the unit that requires grad; its backward runs
// once the gradients flowing into all of them are known, i.e. after the unit's own backward
// (FSDP2's RegisterPostBackwardFunction over all of a module's inputs).
struct PostBackward : public torch::autograd::Function<PostBackward> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                int64_t state, int64_t unit) {
    ctx->saved_data["state"] = state;
    ctx->saved_data["unit"] = unit;
    torch::autograd::variable_list views;
    for (const auto& x : inputs) views.push_back(x.view_as(x));
    return views;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // saved_data holds IValues only, so the state and the unit travel as integers; both
    // outlive every backward of the model's graph.
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    auto* state = reinterpret_cast<FsdpState*>(ctx->saved_data["state"].toInt());
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    auto* u = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    state->post_backward(u);
    grads.emplace_back();  // state
    grads.emplace_back();  // unit
    return grads;
  }
};

}  // namespace

FsdpState::FsdpState(std::vector<FsdpUnit*> units, std::vector<FsdpUnit*> module_order, const FsdpOptions& options)
    : units_(std::move(units)),
      module_order_(std::move(module_order)),
      options_(options),
      forward_prefetch_(units_.size()),
      backward_prefetch_(units_.size()) {}

void FsdpState::set_forward_prefetch(size_t unit, std::vector<FsdpUnit*> targets) {
  forward_prefetch_.at(unit) = std::move(targets);
}

void FsdpState::set_backward_prefetch(size_t unit, std::vector<FsdpUnit*> targets) {
  backward_prefetch_.at(unit) = std::move(targets);
}

size_t FsdpState::index_of(const FsdpUnit* u) const {
  for (size_t i = 0; i < units_.size(); ++i)
    if (units_[i] == u) return i;
  throw std::logic_error("FSDP unit '" + u->name() + "' is not a unit of this model");
}

// ---------------------------------------------------------------- the hooks

void FsdpState::pre_forward(FsdpUnit* u, std::vector<at::Tensor>& inputs) {
  // Activation checkpointing reruns a unit's forward inside backward: the iteration's
  // order and flags stand, nothing is prefetched for a forward, and the final callback is
  // queued now, with the outer backward: the recomputed unit's pre-backward runs in a
  // nested backward, whose callbacks would run as soon as that one ends.
  const bool recomputing = nn::recomputing();
  if (recomputing) {
    queue_final_callback();
  } else {
    if (u == root()) {
      forward_order_.clear();
      for (auto* unit : units_) unit->enter_idle();
    }
    forward_order_.push_back(u);
    u->enter_forward();
  }
  const auto& mp = options_.mixed_precision;
  for (auto& x : inputs)
    if (mp.cast_forward_inputs && mp.param_dtype && x.is_floating_point() && x.scalar_type() != *mp.param_dtype)
      x = x.to(*mp.param_dtype);
  unshard_now(u);
  if (!recomputing) prefetch_after(u, forward_prefetch_, options_.forward_prefetch, &FsdpState::forward_successor);
  if (u == root() || !at::GradMode::is_enabled()) return;
  std::vector<size_t> hooked;  // the inputs that require grad: all of them go through one node
  std::vector<at::Tensor> through;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      hooked.push_back(i);
      through.push_back(inputs[i]);
    }
  if (hooked.empty()) return;
  auto views =
      PostBackward::apply(at::TensorList(through), reinterpret_cast<int64_t>(this), reinterpret_cast<int64_t>(u));
  for (size_t j = 0; j < hooked.size(); ++j) inputs[hooked[j]] = views[j];
}

at::Tensor FsdpState::post_forward(FsdpUnit* u, at::Tensor y) {
  // A checkpointed forward (no grad) is training too: the unit reshards as usual, and its
  // recomputation registers the pre-backward hook. A recomputation leaves the unit
  // unsharded, since its backward follows at once (as FSDP1's _post_forward during a
  // reentrant-checkpoint recomputation).
  const bool recomputing = nn::recomputing();
  bool training = (at::GradMode::is_enabled() && y.requires_grad()) || nn::in_checkpointed_forward();
  if (!training)
    reshard(u);
  else if (!recomputing && u != root() && u->reshard_after_forward())
    reshard_post_forward(u);
  if (training && y.requires_grad()) y.register_hook([this, u](const at::Tensor&) { pre_backward(u); });
  if (u == root()) {
    last_forward_order_ = forward_order_;
    const auto& output_dtype = options_.mixed_precision.output_dtype;
    if (output_dtype && y.is_floating_point() && y.scalar_type() != *output_dtype) y = y.to(*output_dtype);
  }
  return y;
}

void FsdpState::pre_backward(FsdpUnit* u) {
  queue_final_callback();
  if (!u->enter_pre_backward()) return;  // this backward's pre-backward already ran
  unshard_now(u);
  prefetch_after(u, backward_prefetch_, options_.backward_prefetch == BackwardPrefetch::Pre,
                 &FsdpState::backward_successor);
}

void FsdpState::post_backward(FsdpUnit* u) {
  if (!u->enter_post_backward()) return;  // already reduced in this backward
  // The previous unit's reduction is waited for and folded before this one is issued: one
  // reduction in flight, whose buffers the memory plan counts (core/plan/memory_model.cpp).
  if (reducing_ != nullptr) reducing_->finish_gradients();
  u->reduce_gradients_async(sync_gradients_);
  reducing_ = u;
  reshard(u);
  // The root's post-backward is the last of the iteration: nothing runs backward after it.
  if (options_.backward_prefetch == BackwardPrefetch::Post && u != root() && backward_prefetch_[index_of(u)].empty())
    prefetch(backward_successor(u));
}

// Once per backward, with the outermost one (a checkpoint's nested backward ends early).
void FsdpState::queue_final_callback() {
  if (callback_queued_) return;
  callback_queued_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { final_callback(); });
}

void FsdpState::final_callback() {
  for (auto it = forward_order_.rbegin(); it != forward_order_.rend(); ++it) post_backward(*it);
  for (auto* unit : units_) {
    unit->finish_gradients();
    // No all-gather may outlive the backward: the optimizer is about to change the shards.
    if (unit->unshard_in_flight()) {
      unsharded_bytes_now_ -= unit->full_param_bytes() + unit->post_forward_bytes();
      unit->discard_unshard();
    }
    // Nor a post-forward piece of a unit whose backward never ran.
    if (unit->state() == FsdpUnit::State::ShardedPostForward) reshard(unit);
  }
  for (auto* unit : units_) unit->enter_idle();
  // Offloaded gradients went to pinned host memory without blocking
  // (fold_reduced_gradients): one wait for all of them, before a clip or the optimizer
  // reads them on the host (FSDP2 waits on each parameter's grad_offload_event in
  // finalize_backward). A no-op on the CPU.
  if (options_.cpu_offload) {
    std::vector<at::Device> devices;  // the units' compute devices, each once
    for (auto* unit : units_)
      if (std::find(devices.begin(), devices.end(), unit->device()) == devices.end()) devices.push_back(unit->device());
    for (const auto& device : devices) runtime::synchronize(device);
  }
  reducing_ = nullptr;
  callback_queued_ = false;
}

// ---------------------------------------------------------------- unshard, reshard

void FsdpState::held(int64_t bytes) {
  unsharded_bytes_now_ += bytes;
  peak_unsharded_bytes_ = std::max(peak_unsharded_bytes_, unsharded_bytes_now_);
}

void FsdpState::unshard_now(FsdpUnit* u) {
  issue_unshard(u);
  const int64_t piece = u->post_forward_bytes();
  u->wait_unshard();
  held(u->post_forward_bytes() - piece);  // a piece freed, or one kept
}

// Issues u's all-gather unless u is unsharded or its all-gather is in flight already.
void FsdpState::issue_unshard(FsdpUnit* u) {
  if (u->state() == FsdpUnit::State::Unsharded || u->unshard_in_flight()) return;
  if (!u->replicated()) {
    held(u->full_param_bytes());
    if (all_gather_listener_) all_gather_listener_(*u);
  }
  u->unshard_async();
}

void FsdpState::reshard(FsdpUnit* u) {
  if (u->state() == FsdpUnit::State::Unsharded && !u->replicated()) unsharded_bytes_now_ -= u->full_param_bytes();
  unsharded_bytes_now_ -= u->post_forward_bytes();
  u->reshard();
}

// After a training forward: fully, or to the post-forward piece (reshard_after_forward=k).
void FsdpState::reshard_post_forward(FsdpUnit* u) {
  if (u->state() == FsdpUnit::State::Unsharded && !u->replicated()) unsharded_bytes_now_ -= u->full_param_bytes();
  u->reshard_post_forward();
}

// ---------------------------------------------------------------- prefetch

void FsdpState::prefetch(FsdpUnit* u) {
  if (u == nullptr || u->state() == FsdpUnit::State::Unsharded || u->unshard_in_flight()) return;
  int in_flight = 0;
  for (auto* other : units_) in_flight += other->unshard_in_flight();
  if (in_flight >= options_.max_inflight_all_gathers) return;
  issue_unshard(u);
}

// The explicit prefetch list of u, if one was set, else the implicit prefetch of `next`
// when `implicit` is on.
void FsdpState::prefetch_after(FsdpUnit* u, const std::vector<std::vector<FsdpUnit*>>& explicit_lists, bool implicit,
                               FsdpUnit* (FsdpState::*next)(FsdpUnit*) const) {
  const auto& targets = explicit_lists[index_of(u)];
  if (!targets.empty()) {
    for (auto* target : targets) issue_unshard(target);
  } else if (implicit) {
    prefetch((this->*next)(u));
  }
}

// The unit after this run of u in the previous iteration's forward order (the k-th run
// of a unit that runs k times follows its k-th place); on the first iteration, the unit
// after u in module order.
FsdpUnit* FsdpState::forward_successor(FsdpUnit* u) const {
  const auto& order = last_forward_order_.empty() ? module_order_ : last_forward_order_;
  auto run = std::count(forward_order_.begin(), forward_order_.end(), u) - 1;  // u's runs before this one
  for (size_t i = 0; i + 1 < order.size(); ++i)
    if (order[i] == u && run-- == 0) return order[i + 1];
  return nullptr;
}

// The unit whose backward runs after u's: the one before u in forward order; after
// the root's (first in forward, first in backward: its head) comes the last unit.
// A unit that ran k times: its j-th backward is that of its j-th run from the end.
FsdpUnit* FsdpState::backward_successor(FsdpUnit* u) const {
  const auto& order = forward_order_;
  if (order.empty()) return nullptr;
  if (u == root()) return order.size() > 1 ? order.back() : nullptr;
  int later_runs = u->pre_backwards() - 1;  // u's runs whose backward came before this one
  for (size_t i = order.size() - 1; i >= 1; --i)
    if (order[i] == u && later_runs-- == 0) return i > 1 ? order[i - 1] : nullptr;
  return nullptr;
}

}  // namespace fsdpp::fsdp
