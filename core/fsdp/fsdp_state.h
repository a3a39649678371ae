// The protocol of one sharded model, in the shape of FSDP2's FSDPState (_fsdp_state.py):
// one object that owns what an iteration carries from hook to hook (the forward order,
// the unit whose gradient reduction is in flight, whether the final callback is queued,
// the prefetch lists, the unsharded bytes held) and is the hooks. ShardedModel builds the
// units and installs these hooks on their modules (nn::call's forward hooks); the
// reductions and all-gathers themselves are the units' (fsdp_unit.h).
//
// The protocol, driven by forward hooks (nn::call), tensor hooks and autograd:
//
//   forward, unit U:   pre:  unshard U (wait); prefetch the next unit's all-gather;
//                            route U's input through PostBackward (identity whose
//                            backward runs once U's backward is done)
//                      post: reshard U (FULL_SHARD, not the root; to its post-forward
//                            piece with reshard_after_forward = K); hook U's output so
//                            that U's pre-backward runs when its gradient arrives
//   backward, unit U:  pre:  (first one: queue the final callback) unshard U (wait);
//                            prefetch the unit that runs backward next (BACKWARD_PRE)
//                      post: reduce-scatter U's gradients (async); reshard U;
//                            BACKWARD_POST prefetch
//   final callback:         post-backward for units whose inputs needed no gradient
//                            (the root, or a first block fed raw data); wait for every
//                            reduction; place the gradient shards; drop all-gathers
//                            and post-forward pieces left over.
//   activation checkpointing (nn::checkpoint): U's first forward runs without grad
//                            (post reshards as above, hooks nothing); backward reruns
//                            pre/forward/post with grad: pre unshards U again, neither
//                            records order nor prefetches; post keeps U unsharded and
//                            hooks the recomputed output; the nested backward through
//                            it runs U's pre- and post-backward as usual.
// Same semantics as FSDP2's FSDPState/FSDPParamGroup hooks, and like FSDP2 the root
// unit stays unsharded from its forward until the end of backward.
//
// Not thread-safe: the autograd engine runs CPU backward on the calling thread; hooks of one
// model never run concurrently.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/fsdp/fsdp_unit.h"
#include "core/fsdp/sharded_model.h"

namespace fsdpp::fsdp {

class FsdpState {
 public:
  // `units`: creation order, the root last. `module_order`: the root, then the wrapped
  // units in module order (the first iteration's prefetch order). The units and `options`
  // (prefetch, mixed precision's input and output casts, offload) outlive this.
  FsdpState(std::vector<FsdpUnit*> units, std::vector<FsdpUnit*> module_order, const FsdpOptions& options);

  // The hooks (above).
  void pre_forward(FsdpUnit* u, std::vector<at::Tensor>& inputs);
  at::Tensor post_forward(FsdpUnit* u, at::Tensor y);
  void pre_backward(FsdpUnit* u);
  void post_backward(FsdpUnit* u);

  // ShardedModel's controls of the same names (by unit index in creation order).
  void set_requires_gradient_sync(bool sync) { sync_gradients_ = sync; }
  void set_forward_prefetch(size_t unit, std::vector<FsdpUnit*> targets);
  void set_backward_prefetch(size_t unit, std::vector<FsdpUnit*> targets);
  void set_all_gather_listener(std::function<void(const FsdpUnit&)> listener) {
    all_gather_listener_ = std::move(listener);
  }

  // Most unsharded parameter bytes (post-forward pieces too) alive at once so far.
  int64_t peak_unsharded_bytes() const { return peak_unsharded_bytes_; }

 private:
  FsdpUnit* root() const { return units_.back(); }
  size_t index_of(const FsdpUnit* u) const;

  // Unsharding and resharding, with the bytes held counted.
  void unshard_now(FsdpUnit* u);
  void issue_unshard(FsdpUnit* u);
  void reshard(FsdpUnit* u);
  void reshard_post_forward(FsdpUnit* u);
  void held(int64_t bytes);

  // Prefetch: the implicit next unit (within the in-flight limit), or the explicit list.
  void prefetch(FsdpUnit* u);
  void prefetch_after(FsdpUnit* u, const std::vector<std::vector<FsdpUnit*>>& explicit_lists, bool implicit,
                      FsdpUnit* (FsdpState::*next)(FsdpUnit*) const);
  FsdpUnit* forward_successor(FsdpUnit* u) const;
  FsdpUnit* backward_successor(FsdpUnit* u) const;

  void queue_final_callback();
  void final_callback();

  std::vector<FsdpUnit*> units_;
  std::vector<FsdpUnit*> module_order_;
  const FsdpOptions& options_;
  bool sync_gradients_ = true;
  std::vector<std::vector<FsdpUnit*>> forward_prefetch_, backward_prefetch_;  // by unit index; empty: implicit
  std::function<void(const FsdpUnit&)> all_gather_listener_;

  // The iteration's state.
  std::vector<FsdpUnit*> forward_order_;       // this iteration's pre-forward order
  std::vector<FsdpUnit*> last_forward_order_;  // the previous iteration's (for prefetch)
  bool callback_queued_ = false;
  // The unit whose gradient reduction was issued last and is not yet folded: at most one is
  // in flight (post_backward), as FSDP2's reduce_scatter_state, so the reduce buffers
  // alive at once do not depend on how far the communication thread has got.
  FsdpUnit* reducing_ = nullptr;
  int64_t unsharded_bytes_now_ = 0;
  int64_t peak_unsharded_bytes_ = 0;
};

}  // namespace fsdpp::fsdp
