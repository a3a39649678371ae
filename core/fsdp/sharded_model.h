// fully_shard for LibTorch modules: a model whose units all-gather their parameters
// just in time, and reduce-scatter gradients as soon as each unit's backward is done.
//
// Usage (FSDP2-like):
//   auto sharded = ShardedModel::create(model, world, options, wrap_by_module_type({...}));
//   torch::optim::AdamW opt(sharded->parameters(), ...);   // local shards only
//   auto logits = fsdpp::nn::call(model, input);              // hooks run the protocol
//   loss.backward(); sharded->clip_grad_norm(1.0); opt.step();
//
// The model must call wrapped submodules through fsdpp::nn::call. A parameter shared by
// several modules (tied weights) belongs to the unit of their closest wrapped ancestor.
// As with FSDP2, a parameter must get a gradient on all ranks or on none in a step.
// The ShardedModel must outlive any autograd graph built through the model.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/communicator.h"
#include "core/fsdp/fsdp_unit.h"
#include "core/fsdp/sharding.h"
#include "core/fsdp/wrap_policy.h"

namespace fsdpp::fsdp {

class FsdpState;  // fsdp_state.h

enum class BackwardPrefetch { None, Pre, Post };  // FSDP's BACKWARD_PRE / BACKWARD_POST

// FSDP2's MixedPrecisionPolicy. The shards (and so the optimizer and its state) keep the
// parameters' own dtype; unset dtypes mean "the same as the parameters".
struct MixedPrecisionPolicy {
  std::optional<at::ScalarType> param_dtype;   // unsharded parameters, compute, all-gather
  std::optional<at::ScalarType> reduce_dtype;  // gradient reduction (default: param_dtype)
  std::optional<at::ScalarType> output_dtype;  // the root's forward output is cast to it
  bool cast_forward_inputs = true;             // floating inputs of each unit -> param_dtype
};

// How gradients are combined across ranks and micro-steps.
//  Fast: FSDP2's, a reduce-scatter averaging the ranks' (micro-step-summed) gradients.
//    Its floating-point summation order depends on the world size and the sharding.
//  WorldSizeInvariant: for `fsdpp train --deterministic`. A rank's micro-step gradient
//    (one "chunk" of the global batch, chunk c = micro * world_size + rank, see
//    core/data/sampler.h) has the same bits on any rank of any world size when the
//    per-rank batch is the same. Each micro-step sends every rank's slices of every
//    destination's shard in one world-wide all-to-all (hybrid strategies: across the
//    whole world, not shard group then replicas; NO_SHARD: every rank's whole gradient),
//    and each destination folds them into .grad in world-rank order, so after the last
//    micro-step .grad = (((g_0 + g_1) + g_2) + ...) over chunks in global order, with no
//    averaging: the caller scales it once. The same bits for any world size and any
//    strategy. Every unit, even a one-rank one, keeps a separate flat shard (as with
//    mixed precision). Costs: per micro-step communication; the same wire bytes as the
//    reduce-scatter for FULL_SHARD / SHARD_GRAD_OP, (N-1)/(S-1) times the shard group's
//    for hybrid (N ranks, S per shard group; no replica all-reduce), and N/2 times the
//    all-reduce's for NO_SHARD. Tallied as CollectiveKind::AllToAll.
enum class ReductionOrder { Fast, WorldSizeInvariant };

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::FullShard;
  bool forward_prefetch = true;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::Pre;
  int max_inflight_all_gathers = 2;  // FSDP1's limit_all_gathers rate limit
  // Hybrid strategies: ranks per shard group. 0: the largest divisor of the world size
  // below it (so both mesh dimensions are real on one machine); must divide the world.
  int hybrid_shard_size = 0;
  MixedPrecisionPolicy mixed_precision;
  // FSDP2's CPUOffloadPolicy: shards, their gradients and so the optimizer step live in
  // host memory (pinned on CUDA); shards are copied to the device to be all-gathered.
  bool cpu_offload = false;
  // Deferred initialisation. Parameters on the meta device get their values when they are
  // sharded: `materialize` writes rows [first_row, first_row + out.size(0)) of parameter
  // `name` (full shape `shape`) into `out`, and each rank asks only for its own rows
  // (a seed-deterministic init, or rows read from a checkpoint). With
  // `sync_module_states` (FSDP1's), rank 0's values are broadcast unit by unit instead;
  // the other ranks may hold meta tensors. Either way a rank holds at most its shards
  // plus one unit's full parameters during setup.
  std::function<void(const std::string& name, const std::vector<int64_t>& shape, int64_t first_row, at::Tensor out)>
      materialize;
  bool sync_module_states = false;
  // Where parameters on the meta device are materialised and computed (FSDP2 takes it
  // from the mesh's device type). Parameters already on a device stay there.
  // Unset: the CPU for meta parameters (and sync_module_states' broadcast).
  std::optional<at::Device> device;
  ReductionOrder reduction_order = ReductionOrder::Fast;
  // For models whose parameters are used data-dependently (a mixture of experts: an expert
  // only when a token picks it), so that ranks differ in which parameters got a gradient:
  // each unit's reduction first takes the union of "has a gradient" over the ranks (one
  // small all-reduce per unit and step), a rank without a gradient contributes zeros, and
  // every rank's shard gets the reduced gradient, as one process summing them would. Off:
  // every rank must give gradients to the same parameters (FSDP2's assumption).
  bool gradients_may_differ_across_ranks = false;
  // FSDP2's set_gradient_divide_factor: a reduced gradient is the ranks' sum divided by this
  // factor instead of their average (1: the plain sum, as for a loss already divided by the
  // global token count). Unset: the average. Not with ReductionOrder::WorldSizeInvariant,
  // whose caller scales the folded sum itself.
  std::optional<double> gradient_divide_factor;
};

struct MemoryStats {
  int64_t full_param_bytes = 0;  // the whole model, unsharded
  int64_t shard_bytes = 0;       // persistent parameter storage on this rank (incl. padding)
  int64_t padding_bytes = 0;
  int64_t sharded_grad_bytes = 0;    // gradient storage held now
  int64_t peak_unsharded_bytes = 0;  // most unsharded parameter bytes alive at once (post-forward pieces too)
};

class ShardedModel {
 public:
  // Collective over `world`: every rank passes the same model structure and options.
  // The model's current parameter values (identical on all ranks) become the shards.
  // `world` must outlive the model (set_reshard_after_forward makes groups from it).
  static std::shared_ptr<ShardedModel> create(const std::shared_ptr<torch::nn::Module>& root, comm::Communicator& world,
                                              const FsdpOptions& options, const WrapPolicy& policy);
  ~ShardedModel();

  // What the optimizer sees: the local shards (a NO_SHARD or one-rank unit's are the
  // module's own parameters), unique, in model order.
  std::vector<at::Tensor> parameters() const;
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;

  // FSDP2's set_requires_gradient_sync: false keeps unsharded gradients locally
  // (gradient accumulation without communication) until a backward with true.
  // ReductionOrder::WorldSizeInvariant keeps each such backward's packed gradients apart and
  // sends them with the synced one, in one all-to-all per unit, folded in the order syncing
  // every backward folds them (the same bits; one padded gradient held per backward).
  void set_requires_gradient_sync(bool sync);

  // FSDP2's set_modules_to_forward_prefetch / set_modules_to_backward_prefetch: when the
  // forward (backward) of `unit`'s module starts, the all-gathers of `targets` are issued
  // right after its own, in this order, in place of the implicit prefetch of the next unit
  // (FsdpOptions::forward_prefetch, backward_prefetch) and whatever max_inflight_all_gathers
  // says. An empty list restores the implicit prefetch. Every module named must be one a
  // unit wraps (the root's included); any other throws std::invalid_argument.
  void set_forward_prefetch(const torch::nn::Module& unit, const std::vector<const torch::nn::Module*>& targets);
  void set_backward_prefetch(const torch::nn::Module& unit, const std::vector<const torch::nn::Module*>& targets);
  // FSDP2's per-module reshard_after_forward: false keeps `unit` unsharded from its forward
  // to its backward (no all-gather in backward, as SHARD_GRAD_OP does for every unit), true
  // reshards it after its forward (FULL_SHARD's). The root stays unsharded from its forward
  // to the end of backward whatever the strategy: naming it throws std::invalid_argument.
  void set_reshard_after_forward(const torch::nn::Module& unit, bool reshard);
  // FSDP2's reshard_after_forward as an int (ZeRO++'s hpZ): after its forward, `unit` keeps
  // 1/group_size of its gathered parameters, and its backward all-gather runs over
  // group_size consecutive ranks of the shard group (a node, say) instead of all of it.
  // group_size must divide the shard group size and lie strictly between 1 and it
  // (std::invalid_argument otherwise, or for the root). Collective over the shard group:
  // the first call for a size creates its groups, so every rank makes the same calls.
  void set_reshard_after_forward(const torch::nn::Module& unit, int group_size);
  // Called with each unit whose all-gather the protocol issues, in issue order (so in the
  // order the shard group runs them), whether for the unit's own use or as a prefetch.
  void set_all_gather_listener(std::function<void(const FsdpUnit&)> listener);

  // Total norm of all gradients (one all-reduce), and scales the local gradient shards by
  // max_norm / (norm + 1e-6) when that is below 1; same result as clip_grad_norm_ on the
  // unsharded model. norm_type: any p > 0, or infinity. ReductionOrder::WorldSizeInvariant:
  // per-row sums of |g|^p in double, one all-gather, folded in global row order (the
  // same bits on any world size, so clipping is invariant too).
  double clip_grad_norm(double max_norm, double norm_type = 2.0);
  double grad_norm(double norm_type = 2.0);
  // The same, returning the norm as a 0-dim fp64 tensor the host has not read: on the
  // gradients' device, unless ReductionOrder::WorldSizeInvariant (its fold runs on the host).
  at::Tensor clip_grad_norm_on_device(double max_norm, double norm_type = 2.0);
  at::Tensor grad_norm_on_device(double norm_type = 2.0);

  // Collective: the full parameters / gradients (undefined where none), by name.
  std::vector<std::pair<std::string, at::Tensor>> gather_full_parameters();
  std::vector<std::pair<std::string, at::Tensor>> gather_full_gradients();

  MemoryStats memory() const;
  // Traffic of FSDP's own process groups (shard and replicate), summed.
  comm::KindStats comm_stats(comm::CollectiveKind kind) const;
  void reset_comm_stats();
  const std::vector<std::shared_ptr<FsdpUnit>>& units() const { return units_; }
  // The modules the units wrap and their names, in module order (named_modules' pre-order),
  // the root's excluded: what the per-unit controls above take. (units() is children first.)
  std::vector<std::pair<std::string, const torch::nn::Module*>> wrapped_modules() const;
  const FsdpOptions& options() const { return options_; }
  int shard_group_size() const;

 private:
  ShardedModel() = default;

  std::shared_ptr<torch::nn::Module> root_;
  FsdpOptions options_;
  comm::Communicator* world_ = nullptr;  // create()'s, which must outlive the model
  std::string tag_;                      // names this model's process groups
  UnitComms comms_;
  std::map<int, std::shared_ptr<comm::Communicator>> post_forward_groups_;  // by size: this rank's
  std::vector<std::shared_ptr<FsdpUnit>> units_;                            // creation order; the root unit last
  std::vector<const torch::nn::Module*> unit_modules_;
  // The protocol (fsdp_state.h): the hooks and the iteration's state.
  std::unique_ptr<FsdpState> state_;

  // The unit that wraps `module` (its index in units_); throws naming `call` when none does.
  size_t unit_index(const torch::nn::Module& module, const char* call) const;
};

}  // namespace fsdpp::fsdp
