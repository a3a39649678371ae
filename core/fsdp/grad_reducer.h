// A unit's gradients on their way back (compare FSDP2's _fsdp_collectives.py, its
// reduce-scatter half): packed into the reduction's input (reduce_scatter_input,
// replica_reduce_input), reduced across ranks (the reducers below), and folded into the
// sharded .grad (fold_reduced_gradients).
// How a unit's gradients are reduced across ranks: where a gradient is reduce-scattered.
// One interface, one implementation per mode (make_grad_reducer picks it from the unit's
// process groups, FsdpUnit owns it):
//   - ShardAverage: FSDP2's reduce-scatter with ReduceOp.AVG over the shard group
//     (FULL_SHARD, SHARD_GRAD_OP); the rank keeps the average of its shard.
//   - HybridAverage: the same over the shard group, then an all-reduce (AVG) of the shard
//     across the replicate group (HYBRID_SHARD, HYBRID_SHARD_ZERO2, and NO_SHARD units
//     that keep a separate master copy: a shard group of one).
//   - ReplicaAverage: NO_SHARD units whose module tensors are the parameters: one flat
//     all-reduce (AVG) of the whole gradients across the replicas.
//   - WorldOrdered: ReductionOrder::WorldSizeInvariant (sharded_model.h): every world
//     rank's slice of each destination's shard in one world-wide all-to-all, unsummed; the
//     unit folds them into .grad in world-rank order.
// Buffers (fsdp_param.h has the layout): a sharded unit hands issue() the padded
// reduce-scatter input [S * shard_total] in reduce dtype; a replicated unit hands it the
// flat gradients padded to a multiple of the replicas. wait() gives back what the unit
// adds into .grad, in the order it adds them.
// Collective over the reducer's groups: every rank issues the same reductions in order.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "core/comm/communicator.h"
#include "core/fsdp/fsdp_param.h"

namespace fsdpp::fsdp {

struct UnitComms;  // fsdp_unit.h

// One issued reduction: the collective and the buffer it writes.
struct PendingReduction {
  comm::CommWork work;
  at::Tensor output;
};

class GradReducer {
 public:
  virtual ~GradReducer() = default;

  // Issues the reduction of `input` (the layout above); returns at once.
  virtual PendingReduction issue(const at::Tensor& input) = 0;

  // Waits for `pending` and returns the buffers to add into the gradients, in order: one
  // reduced shard (or the reduced flat gradients), or for WorldOrdered one slice per world
  // rank, rank 0 first. Each has the shard buffer's layout ([shard_total], or the flat
  // gradients for ReplicaAverage). Throws what the communicator throws.
  virtual std::vector<at::Tensor> wait(PendingReduction& pending) = 0;

  // Whether the fold starts from a zero .grad (WorldOrdered: ((0 + g_0) + g_1) + ..., so
  // that a first step, a step after zero_grad and a resumed step fold alike) rather than
  // from a copy of the first buffer.
  virtual bool folds_from_zero() const { return false; }
};

// The reducer for a unit with these groups: WorldOrdered when comms.world is set, else
// ReplicaAverage for a replicated unit (null where there is one replica: the local
// gradients are the result), else HybridAverage where the replicate group has several
// ranks, else ShardAverage. `shard_total`: elements per rank of the unit's shard buffer.
std::unique_ptr<GradReducer> make_grad_reducer(const UnitComms& comms, bool replicated, int64_t shard_total);

// The reduce-scatter input [group_size * shard_total] with `options` (reduce dtype, the
// compute device): every rank's rows of each accumulated gradient at its shard's place
// (cast to the reduce dtype as they are copied in), zeros everywhere else (padding rows,
// parameters without a gradient, gaps). Moves the gradients out of `accumulated` (they
// are reduced now). Throws std::logic_error if two parameters' shards overlap.
at::Tensor reduce_scatter_input(const std::vector<FsdpParam>& params, std::vector<at::Tensor>& accumulated,
                                const std::vector<bool>& has_grad, int64_t shard_total, int group_size,
                                const at::TensorOptions& options);

// A replicated unit's whole gradients as one flat buffer, zero-padded to a multiple of
// `replicas` so that every rank owns an equal chunk of the all-reduce.
at::Tensor replica_reduce_input(const std::vector<FsdpParam>& params, const std::vector<bool>& has_grad, int replicas);

// Folds reduced buffers (GradReducer::wait's, in order) into the gradients of the
// parameters that had one: a replicated unit's module tensors get a copy of their part of
// the single flat buffer; a sharded unit's .grad becomes ((grad + b_0) + b_1) + ... in the
// master dtype and place (`master`: the flat shard's options), starting from zeros when
// `from_zero` and .grad is undefined, else from a copy of b_0. The copy of a lone b_0 is
// non-blocking: to pinned host memory (offload) it may still be in flight on return, and
// the caller synchronizes the device before host code reads the gradients.
void fold_reduced_gradients(std::vector<FsdpParam>& params, const std::vector<bool>& has_grad,
                            const std::vector<at::Tensor>& reduced, bool replicated, bool from_zero,
                            const at::TensorOptions& master);

// One unit's gradients from its backward to its sharded .grad, across an iteration: what
// each backward adds (accumulated unsharded, in reduce_dtype, while gradient sync is off),
// the reductions issued through the unit's GradReducer, and their fold. `params` and
// `comms` are the unit's and outlive this.
class UnitGradients {
 public:
  UnitGradients(std::vector<FsdpParam>& params, const UnitComms& comms, bool replicated, int64_t shard_total,
                at::Device device, at::ScalarType reduce_dtype);

  // After the unit's backward. With sync, issues the reduction of its gradients (packed by
  // reduce_scatter_input or replica_reduce_input), then frees the unsharded grads. Without
  // sync they are added into an unsharded accumulator kept in reduce_dtype, reduced at the
  // next sync. World-size-invariant order (comms.world set): every micro-step is packed
  // alone and kept until the synced one sends all of them in one all-to-all, so the fold
  // adds them in the order syncing every micro-step would (the same bits).
  void issue(bool sync);
  // Waits for the reductions issued and folds them into the sharded .grad (`master`: the
  // flat shard's options; a replicated unit's module tensors get theirs).
  void finish(const at::TensorOptions& master);
  bool in_flight() const { return !pending_.empty(); }

 private:
  struct Pending {
    PendingReduction reduction;
    std::vector<bool> has_grad;  // which params had a gradient
  };
  // FsdpOptions::gradients_may_differ_across_ranks: which parameters got a gradient on
  // any rank of the shard and replicate groups (a Max all-reduce of the flags).
  std::vector<bool> on_any_rank(const std::vector<bool>& has_grad) const;

  std::vector<FsdpParam>& params_;
  const UnitComms& comms_;
  bool replicated_;
  int64_t shard_total_;
  at::Device device_;
  at::ScalarType reduce_dtype_;
  std::unique_ptr<GradReducer> reducer_;  // null: nothing to reduce (one replica)
  std::vector<at::Tensor> accumulators_;  // per param: unsharded grads of no-sync micro-steps
  std::vector<Pending> pending_;
  // World-size-invariant order without sync: the packed inputs of the micro-steps not yet
  // sent, and which parameters any of them reduces.
  std::vector<at::Tensor> unsent_inputs_;
  std::vector<bool> unsent_reduced_;
};

}  // namespace fsdpp::fsdp
