// A sharded model: its process groups, its units (unit_plan.cpp picks them), the protocol's
// hooks installed on the units' modules (the protocol itself: fsdp_state.cpp), the per-unit
// controls, clipping and the queries.
#include "core/fsdp/sharded_model.h"

#include <ATen/ATen.h>
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
#include "core/fsdp/fsdp_state.h"
#include "core/fsdp/grad_norm.h"
#include "core/fsdp/unit_plan.h"
#include "core/nn/checkpoint.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"
#include "core/optim/gradients.h"
#include "core/runtime/device.h"

namespace fsdpp::fsdp {

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
      auto mesh = comm::make_hybrid_mesh(world, shard_group_size(options.strategy, n, options.hybrid_shard_size),
                                         tag + "/mesh");
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
  // Step 4: the protocol (fsdp_state.h), whose hooks every unit's module calls (nn::call).
  std::vector<FsdpUnit*> units, module_order{m->units_.back().get()};
  for (auto& unit : m->units_) units.push_back(unit.get());
  for (const auto& [name, module] : m->wrapped_modules())
    module_order.push_back(m->units_[m->unit_index(*module, "create")].get());
  m->state_ = std::make_unique<FsdpState>(std::move(units), std::move(module_order), m->options_);
  for (size_t i = 0; i < m->units_.size(); ++i) {
    FsdpState* state = m->state_.get();
    FsdpUnit* unit = m->units_[i].get();
    nn::ForwardHooks hooks;
    hooks.pre = [state, unit](std::vector<at::Tensor>& inputs) { state->pre_forward(unit, inputs); };
    hooks.post = [state, unit](at::Tensor y) { return state->post_forward(unit, std::move(y)); };
    nn::set_forward_hooks(m->unit_modules_[i], std::move(hooks));
  }
  return m;
}

ShardedModel::~ShardedModel() {
  for (auto* module : unit_modules_) nn::clear_forward_hooks(module);
}

// ---------------------------------------------------------------- per-unit controls

void ShardedModel::set_requires_gradient_sync(bool sync) { state_->set_requires_gradient_sync(sync); }

void ShardedModel::set_all_gather_listener(std::function<void(const FsdpUnit&)> listener) {
  state_->set_all_gather_listener(std::move(listener));
}

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
  state_->set_forward_prefetch(unit_index(unit, "set_forward_prefetch"), std::move(units));
}

void ShardedModel::set_backward_prefetch(const torch::nn::Module& unit,
                                         const std::vector<const torch::nn::Module*>& targets) {
  std::vector<FsdpUnit*> units;
  units.reserve(targets.size());
  for (const auto* target : targets) units.push_back(units_[unit_index(*target, "set_backward_prefetch")].get());
  state_->set_backward_prefetch(unit_index(unit, "set_backward_prefetch"), std::move(units));
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
  if (const auto problem = post_forward_group_size_problem(group_size, shard_size); !problem.empty())
    throw std::invalid_argument("ShardedModel::set_reshard_after_forward: a group size of " +
                                std::to_string(group_size) + " " + problem +
                                " (true or false for the whole group or none)");
  auto& group = post_forward_groups_[group_size];
  if (!group) {
    // Consecutive ranks of this rank's shard group (shard groups are consecutive world
    // ranks in every strategy), named uniquely in the world.
    const int shard_rank = comms_.shard->rank(), first = world_->rank() - shard_rank;
    const int g = shard_rank / group_size;
    std::vector<int> ranks(static_cast<size_t>(group_size));
    for (int j = 0; j < group_size; ++j) ranks[static_cast<size_t>(j)] = first + g * group_size + j;
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
  s.peak_unsharded_bytes = state_->peak_unsharded_bytes();
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
