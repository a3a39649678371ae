// The FSDP protocol, driven by forward hooks (nn::call), tensor hooks and autograd:
//
//   forward, unit U:   pre:  unshard U (wait); prefetch the next unit's all-gather;
//                            route U's input through PostBackward (identity whose
//                            backward runs once U's backward is done)
//                      post: reshard U (FULL_SHARD, not the root); hook U's output so
//                            that U's pre-backward runs when its gradient arrives
//   backward, unit U:  pre:  (first one: queue the final callback) unshard U (wait);
//                            prefetch the unit that runs backward next (BACKWARD_PRE)
//                      post: reduce-scatter U's gradients (async); reshard U;
//                            BACKWARD_POST prefetch
//   final callback:         post-backward for units whose inputs needed no gradient
//                            (the root, or a first block fed raw data); wait for every
//                            reduction; place the gradient shards.
//   activation checkpointing (nn::checkpoint): U's first forward runs without grad
//                            (post reshards as above, hooks nothing); backward reruns
//                            pre/forward/post with grad: pre unshards U again, neither
//                            records order nor prefetches; post keeps U unsharded and
//                            hooks the recomputed output; the nested backward through
//                            it runs U's pre- and post-backward as usual.
// Same semantics as FSDP2's FSDPState/FSDPParamGroup hooks, and like FSDP2 the root
// unit stays unsharded from its forward until the end of backward.
#include "core/fsdp/sharded_model.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/comm/device_mesh.h"
#include "core/fsdp/grad_norm.h"
#include "core/fsdp/unit_plan.h"
#include "core/nn/checkpoint.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"
#include "core/optim/gradients.h"
#include "core/runtime/device.h"

namespace fsdpp::fsdp {

struct ShardedModel::Hooks {
  static FsdpUnit* root(ShardedModel& m) { return m.units_.back().get(); }

  static void unshard_now(ShardedModel& m, FsdpUnit* u) {
    issue_unshard(m, u);
    const int64_t piece = u->post_forward_bytes();
    u->wait_unshard();
    m.unsharded_bytes_now_ -= piece - u->post_forward_bytes();  // a piece freed, or one kept
    m.peak_unsharded_bytes_ = std::max(m.peak_unsharded_bytes_, m.unsharded_bytes_now_);
  }

  // Issues u's all-gather unless u is unsharded or its all-gather is in flight already.
  static void issue_unshard(ShardedModel& m, FsdpUnit* u) {
    if (u->state() == FsdpUnit::State::Unsharded || u->unshard_in_flight()) return;
    if (!u->replicated()) {
      m.unsharded_bytes_now_ += u->full_param_bytes();
      m.peak_unsharded_bytes_ = std::max(m.peak_unsharded_bytes_, m.unsharded_bytes_now_);
      if (m.all_gather_listener_) m.all_gather_listener_(*u);
    }
    u->unshard_async();
  }

  static void reshard(ShardedModel& m, FsdpUnit* u) {
    if (u->state() == FsdpUnit::State::Unsharded && !u->replicated()) m.unsharded_bytes_now_ -= u->full_param_bytes();
    m.unsharded_bytes_now_ -= u->post_forward_bytes();
    u->reshard();
  }

  // After a training forward: fully, or to the post-forward piece (reshard_after_forward=k).
  static void reshard_post_forward(ShardedModel& m, FsdpUnit* u) {
    if (u->state() == FsdpUnit::State::Unsharded && !u->replicated()) m.unsharded_bytes_now_ -= u->full_param_bytes();
    u->reshard_post_forward();
  }

  static void prefetch(ShardedModel& m, FsdpUnit* u) {
    if (u == nullptr || u->state() == FsdpUnit::State::Unsharded || u->unshard_in_flight()) return;
    int in_flight = 0;
    for (auto& other : m.units_) in_flight += other->unshard_in_flight();
    if (in_flight >= m.options_.max_inflight_all_gathers) return;
    issue_unshard(m, u);
  }

  // The explicit prefetch list of u, if one was set, else the implicit prefetch of `next`
  // when `implicit` is on.
  static void prefetch_after(ShardedModel& m, FsdpUnit* u, const std::vector<std::vector<FsdpUnit*>>& explicit_lists,
                             bool implicit, FsdpUnit* (*next)(ShardedModel&, FsdpUnit*)) {
    const auto& targets = explicit_lists[unit_index(m, u)];
    if (!targets.empty()) {
      for (auto* target : targets) issue_unshard(m, target);
    } else if (implicit) {
      prefetch(m, next(m, u));
    }
  }

  static size_t unit_index(ShardedModel& m, const FsdpUnit* u) {
    for (size_t i = 0; i < m.units_.size(); ++i)
      if (m.units_[i].get() == u) return i;
    throw std::logic_error("FSDP unit '" + u->name() + "' is not a unit of this model");
  }

  // The unit after this run of u in the previous iteration's forward order (the k-th run
  // of a unit that runs k times follows its k-th place); on the first iteration, the unit
  // after u in module order.
  static FsdpUnit* forward_successor(ShardedModel& m, FsdpUnit* u) {
    const auto& order = m.last_forward_order_.empty() ? m.module_order_ : m.last_forward_order_;
    auto run = std::count(m.forward_order_.begin(), m.forward_order_.end(), u) - 1;  // u's runs before this one
    for (size_t i = 0; i + 1 < order.size(); ++i)
      if (order[i] == u && run-- == 0) return order[i + 1];
    return nullptr;
  }

  // The unit whose backward runs after u's: the one before u in forward order; after
  // the root's (first in forward, first in backward: its head) comes the last unit.
  // A unit that ran k times: its j-th backward is that of its j-th run from the end.
  static FsdpUnit* backward_successor(ShardedModel& m, FsdpUnit* u) {
    auto& order = m.forward_order_;
    if (order.empty()) return nullptr;
    if (u == root(m)) return order.size() > 1 ? order.back() : nullptr;
    int later_runs = u->pre_backwards() - 1;  // u's runs whose backward came before this one
    for (size_t i = order.size() - 1; i >= 1; --i)
      if (order[i] == u && later_runs-- == 0) return i > 1 ? order[i - 1] : nullptr;
    return nullptr;
  }

  // Once per backward, with the outermost one (a checkpoint's nested backward ends early).
  static void queue_final_callback(ShardedModel& m) {
    if (m.callback_queued_) return;
    m.callback_queued_ = true;
    ShardedModel* model = &m;
    torch::autograd::Engine::get_default_engine().queue_callback([model] { final_callback(*model); });
  }

  static void pre_forward(ShardedModel& m, FsdpUnit* u, std::vector<at::Tensor>& inputs);
  static at::Tensor post_forward(ShardedModel& m, FsdpUnit* u, at::Tensor y);
  static void pre_backward(ShardedModel& m, FsdpUnit* u);
  static void post_backward(ShardedModel& m, FsdpUnit* u);
  static void final_callback(ShardedModel& m);
  static void install(ShardedModel& m);
};

namespace {

// Identity in forward over every input of the unit that requires grad; its backward runs
// once the gradients flowing into all of them are known, i.e. after the unit's own backward
// (FSDP2's RegisterPostBackwardFunction over all of a module's inputs).
struct PostBackward : public torch::autograd::Function<PostBackward> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                int64_t model, int64_t unit) {
    ctx->saved_data["model"] = model;
    ctx->saved_data["unit"] = unit;
    torch::autograd::variable_list views;
    for (const auto& x : inputs) views.push_back(x.view_as(x));
    return views;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // saved_data holds IValues only, so the model and the unit travel as integers; both
    // outlive every backward of the model's graph.
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    auto* m = reinterpret_cast<ShardedModel*>(ctx->saved_data["model"].toInt());
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    auto* u = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    ShardedModel::Hooks::post_backward(*m, u);
    grads.emplace_back();  // model
    grads.emplace_back();  // unit
    return grads;
  }
};

}  // namespace

void ShardedModel::Hooks::pre_forward(ShardedModel& m, FsdpUnit* u, std::vector<at::Tensor>& inputs) {
  // Activation checkpointing reruns a unit's forward inside backward: the iteration's
  // order and flags stand, nothing is prefetched for a forward, and the final callback is
  // queued now, with the outer backward: the recomputed unit's pre-backward runs in a
  // nested backward, whose callbacks would run as soon as that one ends.
  const bool recomputing = nn::recomputing();
  if (recomputing) {
    queue_final_callback(m);
  } else {
    if (u == root(m)) {
      m.forward_order_.clear();
      for (auto& unit : m.units_) unit->enter_idle();
    }
    m.forward_order_.push_back(u);
    u->enter_forward();
  }
  const auto& mp = m.options_.mixed_precision;
  for (auto& x : inputs)
    if (mp.cast_forward_inputs && mp.param_dtype && x.is_floating_point() && x.scalar_type() != *mp.param_dtype)
      x = x.to(*mp.param_dtype);
  unshard_now(m, u);
  if (!recomputing) prefetch_after(m, u, m.forward_prefetch_, m.options_.forward_prefetch, forward_successor);
  if (u == root(m) || !at::GradMode::is_enabled()) return;
  std::vector<size_t> hooked;  // the inputs that require grad: all of them go through one node
  std::vector<at::Tensor> through;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      hooked.push_back(i);
      through.push_back(inputs[i]);
    }
  if (hooked.empty()) return;
  auto views =
      PostBackward::apply(at::TensorList(through), reinterpret_cast<int64_t>(&m), reinterpret_cast<int64_t>(u));
  for (size_t j = 0; j < hooked.size(); ++j) inputs[hooked[j]] = views[j];
}

at::Tensor ShardedModel::Hooks::post_forward(ShardedModel& m, FsdpUnit* u, at::Tensor y) {
  // A checkpointed forward (no grad) is training too: the unit reshards as usual, and its
  // recomputation registers the pre-backward hook. A recomputation leaves the unit
  // unsharded, since its backward follows at once (as FSDP1's _post_forward during a
  // reentrant-checkpoint recomputation).
  const bool recomputing = nn::recomputing();
  bool training = (at::GradMode::is_enabled() && y.requires_grad()) || nn::in_checkpointed_forward();
  if (!training)
    reshard(m, u);
  else if (!recomputing && u != root(m) && u->reshard_after_forward())
    reshard_post_forward(m, u);
  if (training && y.requires_grad()) {
    ShardedModel* model = &m;
    y.register_hook([model, u](const at::Tensor&) { pre_backward(*model, u); });
  }
  if (u == root(m)) {
    m.last_forward_order_ = m.forward_order_;
    const auto& output_dtype = m.options_.mixed_precision.output_dtype;
    if (output_dtype && y.is_floating_point() && y.scalar_type() != *output_dtype) y = y.to(*output_dtype);
  }
  return y;
}

void ShardedModel::Hooks::pre_backward(ShardedModel& m, FsdpUnit* u) {
  queue_final_callback(m);
  if (!u->enter_pre_backward()) return;  // this backward's pre-backward already ran
  unshard_now(m, u);
  prefetch_after(m, u, m.backward_prefetch_, m.options_.backward_prefetch == BackwardPrefetch::Pre, backward_successor);
}

void ShardedModel::Hooks::post_backward(ShardedModel& m, FsdpUnit* u) {
  if (!u->enter_post_backward()) return;  // already reduced in this backward
  // The previous unit's reduction is waited for and folded before this one is issued: one
  // reduction in flight, whose buffers the memory plan counts (core/plan/memory_model.cpp).
  if (m.reducing_ != nullptr) m.reducing_->finish_gradients();
  u->reduce_gradients_async(m.sync_gradients_);
  m.reducing_ = u;
  reshard(m, u);
  // The root's post-backward is the last of the iteration: nothing runs backward after it.
  if (m.options_.backward_prefetch == BackwardPrefetch::Post && u != root(m) &&
      m.backward_prefetch_[unit_index(m, u)].empty())
    prefetch(m, backward_successor(m, u));
}

void ShardedModel::Hooks::final_callback(ShardedModel& m) {
  for (auto it = m.forward_order_.rbegin(); it != m.forward_order_.rend(); ++it) post_backward(m, *it);
  for (auto& unit : m.units_) {
    unit->finish_gradients();
    // No all-gather may outlive the backward: the optimizer is about to change the shards.
    if (unit->unshard_in_flight()) {
      m.unsharded_bytes_now_ -= unit->full_param_bytes() + unit->post_forward_bytes();
      unit->discard_unshard();
    }
    // Nor a post-forward piece of a unit whose backward never ran.
    if (unit->state() == FsdpUnit::State::ShardedPostForward) reshard(m, unit.get());
  }
  for (auto& unit : m.units_) unit->enter_idle();
  // Offloaded gradients went to pinned host memory without blocking
  // (fold_reduced_gradients): one wait for all of them, before a clip or the optimizer
  // reads them on the host (FSDP2 waits on each parameter's grad_offload_event in
  // finalize_backward). A no-op on the CPU.
  if (m.options_.cpu_offload) {
    std::vector<at::Device> devices;  // the units' compute devices, each once
    for (auto& unit : m.units_)
      if (std::find(devices.begin(), devices.end(), unit->device()) == devices.end()) devices.push_back(unit->device());
    for (const auto& device : devices) runtime::synchronize(device);
  }
  m.reducing_ = nullptr;
  m.callback_queued_ = false;
}

// ---------------------------------------------------------------- construction
//
// create() in four steps, each a function below: the units' process groups; which
// parameters each unit manages; per unit, sync_module_states' broadcast and the sharding
// (FsdpUnit's constructor); the forward hooks that drive the protocol.

namespace {

// Step 1: the process groups every unit shares (FSDP2's mesh), named after `tag`: the
// shard group and the replicate group of the strategy, and for the world-size-invariant
// order the world in rank order (FULL_SHARD's shard group or NO_SHARD's replicate group
// is it; a hybrid mesh gets one more group).
UnitComms make_unit_comms(comm::Communicator& world, const FsdpOptions& options, const std::string& tag) {
  const int n = world.size(), me = world.rank();
  std::vector<int> everyone(n), only_me = {me};
  std::iota(everyone.begin(), everyone.end(), 0);
  UnitComms comms;
  comms.agree_on_gradients = options.gradients_may_differ_across_ranks;
  if (options.gradient_divide_factor) {
    const double factor = *options.gradient_divide_factor;
    if (!(factor > 0) || !std::isfinite(factor))
      throw std::invalid_argument("FsdpOptions::gradient_divide_factor must be a positive finite number, not " +
                                  std::to_string(factor));
    if (options.reduction_order == ReductionOrder::WorldSizeInvariant)
      throw std::invalid_argument(
          "FsdpOptions::gradient_divide_factor cannot be combined with ReductionOrder::WorldSizeInvariant, whose "
          "caller scales the folded sum of the ranks' gradients itself");
    comms.divide_factor = factor;
  }
  switch (options.strategy) {
    case ShardingStrategy::FullShard:
    case ShardingStrategy::ShardGradOp:
      comms.shard = world.subgroup(everyone, tag + "/shard");
      comms.replicate = world.subgroup(only_me, tag + "/replicate" + std::to_string(me));
      break;
    case ShardingStrategy::NoShard:
      comms.shard = world.subgroup(only_me, tag + "/shard" + std::to_string(me));
      comms.replicate = world.subgroup(everyone, tag + "/replicate");
      break;
    case ShardingStrategy::HybridShard:
    case ShardingStrategy::HybridShardZero2: {
      int s = options.hybrid_shard_size > 0 ? options.hybrid_shard_size : default_hybrid_shard_size(n);
      auto mesh = comm::make_hybrid_mesh(world, s, tag + "/mesh");
      comms.shard = mesh.shard;
      comms.replicate = mesh.replicate;
      break;
    }
  }
  if (options.reduction_order == ReductionOrder::WorldSizeInvariant) {
    if (comms.shard->size() == n)
      comms.world = comms.shard;
    else if (comms.replicate->size() == n)
      comms.world = comms.replicate;
    else
      comms.world = world.subgroup(everyone, tag + "/world");
  }
  return comms;
}

}  // namespace

// Step 2, which parameters each unit manages: plan_units (unit_plan.cpp).

namespace {

// Step 3a, FSDP1's sync_module_states for one unit: rank 0's values reach every rank
// right before the unit is sharded, so that no rank holds more than one unit in full.
void broadcast_from_rank0(comm::Communicator& world, const std::vector<std::pair<std::string, at::Tensor>>& params,
                          at::Device target) {
  const int me = world.rank();
  for (const auto& [pname, t] : params) {
    if (me == 0 && t.is_meta())
      throw std::invalid_argument("sync_module_states: parameter '" + pname + "' is on the meta device on rank 0");
    at::Tensor full = me == 0 ? t.detach().to(target).contiguous() : at::empty(t.sizes(), t.options().device(target));
    world.broadcast(full, 0);
    if (me != 0 || t.device() != target) nn::set_data_across_devices(t, full);
  }
}

}  // namespace

// Step 4: every unit's module calls the protocol's forward hooks (nn::call).
void ShardedModel::Hooks::install(ShardedModel& m) {
  for (size_t i = 0; i < m.units_.size(); ++i) {
    ShardedModel* model = &m;
    FsdpUnit* unit = m.units_[i].get();
    nn::ForwardHooks hooks;
    hooks.pre = [model, unit](std::vector<at::Tensor>& inputs) { pre_forward(*model, unit, inputs); };
    hooks.post = [model, unit](at::Tensor y) { return post_forward(*model, unit, std::move(y)); };
    nn::set_forward_hooks(m.unit_modules_[i], std::move(hooks));
  }
}

std::shared_ptr<ShardedModel> ShardedModel::create(const std::shared_ptr<torch::nn::Module>& root,
                                                   comm::Communicator& world, const FsdpOptions& options,
                                                   const WrapPolicy& policy) {
  static int instances = 0;  // same sequence on every rank: names the process groups
  std::string tag = "fsdp" + std::to_string(instances++);
  std::shared_ptr<ShardedModel> m(new ShardedModel());
  m->root_ = root;
  m->options_ = options;
  m->world_ = &world;
  m->tag_ = tag;
  m->comms_ = make_unit_comms(world, options, tag);
  const bool reshard_after_forward = reshards_after_forward(options.strategy);
  const UnitPrecision precision{options.mixed_precision.param_dtype, options.mixed_precision.reduce_dtype,
                                options.cpu_offload, options.materialize,
                                options.device.value_or(at::Device(at::kCPU))};
  for (auto& plan : plan_units(*root, policy)) {
    if (options.sync_module_states) broadcast_from_rank0(world, plan.params, precision.meta_device);
    m->units_.push_back(std::make_shared<FsdpUnit>(plan.name.empty() ? "root" : plan.name, std::move(plan.params),
                                                   m->comms_, !plan.is_root && reshard_after_forward, precision));
    m->unit_modules_.push_back(plan.module);
  }
  m->forward_prefetch_.resize(m->units_.size());
  m->backward_prefetch_.resize(m->units_.size());
  m->module_order_.push_back(m->units_.back().get());
  for (const auto& [name, module] : m->wrapped_modules())
    m->module_order_.push_back(m->units_[m->unit_index(*module, "create")].get());
  Hooks::install(*m);
  return m;
}

ShardedModel::~ShardedModel() {
  for (auto* module : unit_modules_) nn::clear_forward_hooks(module);
}

// ---------------------------------------------------------------- per-unit controls

size_t ShardedModel::unit_index(const torch::nn::Module& module, const char* call) const {
  for (size_t i = 0; i < unit_modules_.size(); ++i)
    if (unit_modules_[i] == &module) return i;
  throw std::invalid_argument(std::string("ShardedModel::") + call + ": module '" + module.name() +
                              "' is not wrapped by an FSDP unit of this model");
}

void ShardedModel::set_forward_prefetch(const torch::nn::Module& unit,
                                        const std::vector<const torch::nn::Module*>& targets) {
  std::vector<FsdpUnit*> units;
  units.reserve(targets.size());
  for (const auto* target : targets) units.push_back(units_[unit_index(*target, "set_forward_prefetch")].get());
  forward_prefetch_[unit_index(unit, "set_forward_prefetch")] = std::move(units);
}

void ShardedModel::set_backward_prefetch(const torch::nn::Module& unit,
                                         const std::vector<const torch::nn::Module*>& targets) {
  std::vector<FsdpUnit*> units;
  units.reserve(targets.size());
  for (const auto* target : targets) units.push_back(units_[unit_index(*target, "set_backward_prefetch")].get());
  backward_prefetch_[unit_index(unit, "set_backward_prefetch")] = std::move(units);
}

void ShardedModel::set_reshard_after_forward(const torch::nn::Module& unit, bool reshard) {
  size_t i = unit_index(unit, "set_reshard_after_forward");
  if (i + 1 == units_.size())
    throw std::invalid_argument(
        "ShardedModel::set_reshard_after_forward: the root unit stays unsharded from its forward to the end of "
        "backward; only a wrapped submodule can be set");
  units_[i]->set_reshard_after_forward(reshard);
  units_[i]->set_post_forward_group(nullptr);
}

void ShardedModel::set_reshard_after_forward(const torch::nn::Module& unit, int group_size) {
  size_t i = unit_index(unit, "set_reshard_after_forward");
  const int shard_size = comms_.shard->size();
  if (i + 1 == units_.size())
    throw std::invalid_argument(
        "ShardedModel::set_reshard_after_forward: the root unit stays unsharded from its forward to the end of "
        "backward; only a wrapped submodule can be set");
  if (group_size <= 1 || group_size >= shard_size || shard_size % group_size != 0)
    throw std::invalid_argument("ShardedModel::set_reshard_after_forward: a group size of " +
                                std::to_string(group_size) + " must divide the shard group size " +
                                std::to_string(shard_size) +
                                " and lie strictly between 1 and it (true or false "
                                "for the whole group or none)");
  auto& group = post_forward_groups_[group_size];
  if (!group) {
    // Consecutive ranks of this rank's shard group (shard groups are consecutive world
    // ranks in every strategy), named uniquely in the world.
    const int shard_rank = comms_.shard->rank(), first = world_->rank() - shard_rank;
    const int g = shard_rank / group_size;
    std::vector<int> ranks;
    for (int j = 0; j < group_size; ++j) ranks.push_back(first + g * group_size + j);
    group = world_->subgroup(ranks, tag_ + "/post-forward" + std::to_string(group_size) + "/" + std::to_string(first) +
                                        "+" + std::to_string(g));
  }
  units_[i]->set_reshard_after_forward(true);
  units_[i]->set_post_forward_group(group);
}

// ---------------------------------------------------------------- queries

std::vector<std::pair<std::string, const torch::nn::Module*>> ShardedModel::wrapped_modules() const {
  std::vector<std::pair<std::string, const torch::nn::Module*>> out;
  for (const auto& item : root_->named_modules("", /*include_self=*/false))
    if (std::find(unit_modules_.begin(), unit_modules_.end(), item.value().get()) != unit_modules_.end())
      out.emplace_back(item.key(), item.value().get());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& unit : units_)
    for (auto& p : unit->params()) out.emplace_back(p.name(), p.sharded());
  return out;
}

std::vector<at::Tensor> ShardedModel::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int ShardedModel::shard_group_size() const { return comms_.shard->size(); }

at::Tensor ShardedModel::grad_norm_on_device(double norm_type) { return sharded_grad_norm(units_, comms_, norm_type); }

at::Tensor ShardedModel::clip_grad_norm_on_device(double max_norm, double norm_type) {
  auto total = grad_norm_on_device(norm_type);
  optim::clip_gradients(sharded_gradients(units_), total, max_norm);  // as torch.nn.utils.clip_grad_norm_
  return total;
}

double ShardedModel::grad_norm(double norm_type) { return optim::host_value(grad_norm_on_device(norm_type)); }

double ShardedModel::clip_grad_norm(double max_norm, double norm_type) {
  return optim::host_value(clip_grad_norm_on_device(max_norm, norm_type));
}

namespace {

std::vector<std::pair<std::string, at::Tensor>> gather(const std::vector<std::shared_ptr<FsdpUnit>>& units,
                                                       bool gradients) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& unit : units) {
    auto values = unit->gather_full(gradients);
    for (size_t i = 0; i < values.size(); ++i) out.emplace_back(unit->params()[i].name(), values[i]);
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::gather_full_parameters() { return gather(units_, false); }
std::vector<std::pair<std::string, at::Tensor>> ShardedModel::gather_full_gradients() { return gather(units_, true); }

MemoryStats ShardedModel::memory() const {
  MemoryStats s;
  for (auto& unit : units_) {
    auto u = unit->memory();
    s.full_param_bytes += u.full_param_bytes;
    s.shard_bytes += u.shard_bytes;
    s.padding_bytes += u.padding_bytes;
    s.sharded_grad_bytes += u.sharded_grad_bytes;
  }
  s.peak_unsharded_bytes = peak_unsharded_bytes_;
  return s;
}

namespace {

// The world-size-invariant order's world group, when it is neither the shard nor the
// replicate group (hybrid meshes): its traffic is FSDP's too.
bool world_is_own_group(const UnitComms& c) { return c.world && c.world != c.shard && c.world != c.replicate; }

}  // namespace

comm::KindStats ShardedModel::comm_stats(comm::CollectiveKind kind) const {
  auto total = comms_.shard->stats().get(kind);
  total += comms_.replicate->stats().get(kind);
  if (world_is_own_group(comms_)) total += comms_.world->stats().get(kind);
  for (const auto& [size, group] : post_forward_groups_) total += group->stats().get(kind);
  return total;
}

void ShardedModel::reset_comm_stats() {
  comms_.shard->stats().reset();
  comms_.replicate->stats().reset();
  if (world_is_own_group(comms_)) comms_.world->stats().reset();
  for (const auto& [size, group] : post_forward_groups_) group->stats().reset();
}

}  // namespace fsdpp::fsdp
