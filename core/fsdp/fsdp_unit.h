// A unit: the parameters that one fully_shard call manages, all-gathered together
// through one flat buffer and reduce-scattered together (compare FSDP2's
// FSDPParamGroup). Two states, both named in every protocol error:
//   - State (FSDP2's ShardedState): SHARDED <-> UNSHARDED, with the all-gather possibly
//     in flight in between (issued by a prefetch, completed by the next wait);
//   - TrainingState (FSDP2's TrainingState): IDLE -> FORWARD -> PRE_BACKWARD ->
//     POST_BACKWARD -> IDLE, moved by the hooks (fsdp_state.h; a unit that took no part in
//     backward goes FORWARD -> POST_BACKWARD at the final callback).
// A call the protocol does not allow in the current state throws std::logic_error naming
// the unit, its states and the call: e.g. a backward hook before any forward, or reading
// the sharded gradients while their reduce-scatter is in flight.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/fsdp/fsdp_collectives.h"
#include "core/fsdp/fsdp_param.h"
#include "core/fsdp/grad_reducer.h"

namespace fsdpp::fsdp {

struct UnitComms {
  std::shared_ptr<comm::Communicator> shard;      // parameters are sharded across it
  std::shared_ptr<comm::Communicator> replicate;  // gradients are averaged across it too (may be size 1)
  // Set only in the world-size-invariant reduction order (FsdpOptions::reduction_order):
  // every rank of the world, in world-rank order. World rank j holds shard j % shard->size()
  // (the hybrid mesh's row-major layout; FULL_SHARD: j; NO_SHARD: 0).
  std::shared_ptr<comm::Communicator> world;
  // FsdpOptions::gradients_may_differ_across_ranks.
  bool agree_on_gradients = false;
  // FsdpOptions::gradient_divide_factor: reduce by sum, then divide by it; unset: average.
  std::optional<double> divide_factor;
};

// Dtypes and placement of a unit's buffers (FSDP2's MixedPrecisionPolicy and
// CPUOffloadPolicy, resolved). Unset dtypes mean the parameters' own dtype.
struct UnitPrecision {
  std::optional<at::ScalarType> param_dtype;   // unsharded parameters, all-gather
  std::optional<at::ScalarType> reduce_dtype;  // gradient reduction, no-sync accumulation
  bool offload = false;                        // shards and their gradients in host memory
  RowSource materialize;                       // values of meta parameters (deferred init)
  at::Device meta_device = at::kCPU;           // where meta parameters are materialised
};

// Byte tallies of one unit (this rank).
struct UnitMemory {
  int64_t full_param_bytes = 0;    // the unsharded parameters, all of them
  int64_t shard_bytes = 0;         // the padded flat shard buffer (persistent)
  int64_t padding_bytes = 0;       // zero rows inside shard_bytes
  int64_t sharded_grad_bytes = 0;  // gradient shards currently held
};

class FsdpUnit {
 public:
  // FSDP2's ShardedState: SHARDED_POST_FORWARD holds this rank's piece of the gathered
  // parameters between a forward and its backward (reshard_after_forward as an int).
  enum class State { Sharded, ShardedPostForward, Unsharded };
  enum class TrainingState { Idle, Forward, PreBackward, PostBackward };

  // Parameters keep living in the module; a group of one with no mixed precision and no
  // offload is "replicated": the module's tensors are the shards (no second copy).
  FsdpUnit(std::string name, std::vector<std::pair<std::string, at::Tensor>> params, UnitComms comms,
           bool reshard_after_forward, const UnitPrecision& precision = {});

  const std::string& name() const { return name_; }
  // Where the module computes: the all-gather's and the unsharded parameters' device.
  at::Device device() const { return device_; }
  State state() const { return state_; }
  TrainingState training_state() const { return training_state_; }
  // "UNSHARDED, FORWARD" and what is in flight ("all-gather in flight",
  // "reduce-scatter in flight"): the words protocol errors use.
  std::string describe_state() const;

  // The training-state transitions, called by the hooks (fsdp_state.h).
  // Any state -> IDLE: a new iteration (the root's pre-forward) or the end of backward.
  void enter_idle() {
    training_state_ = TrainingState::Idle;
    pre_backwards_ = 0;
  }
  // Any state -> FORWARD (a unit may run forward more than once in an iteration).
  void enter_forward() { training_state_ = TrainingState::Forward; }
  // FORWARD -> PRE_BACKWARD: true. POST_BACKWARD -> PRE_BACKWARD: true, the backward of an
  // earlier run of a unit that ran forward more than once (each run's backward unshards,
  // and its post-backward reduces what that run added, as FSDP2). Already PRE_BACKWARD:
  // false, nothing to do. IDLE: throws (backward before forward).
  bool enter_pre_backward();
  // How many pre-backwards entered since the iteration began: the k-th is the backward of
  // the unit's k-th run from the end.
  int pre_backwards() const { return pre_backwards_; }
  // FORWARD or PRE_BACKWARD -> POST_BACKWARD: true. Already POST_BACKWARD: false. IDLE:
  // throws (backward before forward).
  bool enter_post_backward();
  bool replicated() const { return replicated_; }
  bool reshard_after_forward() const { return reshard_after_forward_; }
  void set_reshard_after_forward(bool reshard) { reshard_after_forward_ = reshard; }
  // FSDP2's reshard_after_forward=k (ZeRO++'s hpZ): `group` is k consecutive ranks of the
  // shard group (k divides its size). A training forward keeps this rank's 1/k of the
  // gathered buffer (reshard_post_forward), and the backward's all-gather runs over `group`
  // alone; the same bytes, so the same bits. Null: reshard fully.
  void set_post_forward_group(std::shared_ptr<comm::Communicator> group);
  const comm::Communicator* post_forward_group() const { return post_forward_group_.get(); }
  // Bytes of the piece held in SHARDED_POST_FORWARD (0 in any other state).
  int64_t post_forward_bytes() const;
  std::vector<FsdpParam>& params() { return params_; }
  const UnitComms& comms() const { return comms_; }

  // Issues the all-gather (no-op if unsharded or already in flight): over the shard group
  // from the flat shard, or in SHARDED_POST_FORWARD over the post-forward group from the
  // piece.
  void unshard_async();
  bool unshard_in_flight() const { return gather_work_.has_value(); }
  // Completes the unshard: waits for the all-gather, copies out. SHARDED -> UNSHARDED.
  void wait_unshard();
  // Releases the unsharded storage (and a post-forward piece). UNSHARDED or
  // SHARDED_POST_FORWARD -> SHARDED.
  void reshard();
  // After a training forward: UNSHARDED -> SHARDED_POST_FORWARD where a post-forward group
  // is set (the piece was kept when the forward's all-gather finished), else -> SHARDED.
  void reshard_post_forward();
  // Drops an all-gather still in flight (waits for it, discards its data): its values
  // would go stale once the optimizer updates the shards.
  void discard_unshard();

  // After this unit's backward (TrainingState POST_BACKWARD, else throws): with sync, issues
  // the reduction of its gradients in reduce_dtype through the unit's GradReducer
  // (grad_reducer.h: a reduce-scatter averaged like FSDP2's ReduceOp.AVG, hybrid, replica
  // or world-ordered); then frees the unsharded grads. Without sync (no_sync / gradient accumulation) they are added
  // into an unsharded accumulator kept in reduce_dtype, reduced at the next sync.
  // World-size-invariant order (comms().world set): every world rank's gradient slice of
  // each destination's shard travels in one world-wide all-to-all, not summed. Without sync
  // each micro-step's gradients are packed and kept apart (a rank's micro-steps summed first
  // would change the fold's order); the sync micro-step sends all of them in one
  // all-to-all, and the fold adds them in the order sync on every micro-step adds them:
  // the same bits, one collective per step, and the unit's padded gradient held once per
  // micro-step until then.
  void reduce_gradients_async(bool sync);
  // Waits for the reductions issued above and adds the results into the sharded
  // parameters' .grad. World-size-invariant order: folds
  // the received slices into .grad one at a time in world-rank order,
  // grad = ((grad + g_rank0) + g_rank1) + ..., starting from g_rank0 when .grad is
  // undefined; no averaging (the caller scales once).
  void finish_gradients();

  // Collective over the shard group: the full value of every parameter (unit order).
  // Gradients: throws while a reduction is in flight (finish_gradients writes them).
  std::vector<at::Tensor> gather_full(bool gradients);

  UnitMemory memory() const;
  int64_t full_param_bytes() const { return full_param_bytes_; }
  int64_t shard_total() const { return shard_total_; }

 private:
  [[noreturn]] void protocol_error(const std::string& call, const std::string& why) const;

  at::ScalarType param_dtype() const;
  at::ScalarType reduce_dtype() const;

  std::string name_;
  std::vector<FsdpParam> params_;
  UnitComms comms_;
  UnitPrecision precision_;
  bool reshard_after_forward_;
  bool replicated_;
  State state_ = State::Sharded;
  TrainingState training_state_ = TrainingState::Idle;
  int pre_backwards_ = 0;
  int64_t shard_total_ = 0;                   // elements per rank in the flat shard buffer
  at::Device device_ = at::kCPU;              // where the module computes (the all-gather runs there)
  at::ScalarType master_dtype_ = at::kFloat;  // the shards' (optimizer's) dtype
  int64_t full_param_bytes_ = 0;
  at::Tensor flat_shard_;
  std::optional<PendingGather> gather_work_;
  std::shared_ptr<comm::Communicator> post_forward_group_;  // set_post_forward_group
  at::Tensor post_forward_piece_;  // this rank's 1/k of the gathered buffer, param dtype, on device_
  // Its gradients' way back: accumulation, reductions, fold (grad_reducer.h).
  std::unique_ptr<UnitGradients> gradients_;
};

}  // namespace fsdpp::fsdp
