// A unit's bytes on their way to and from the communicator (compare FSDP2's
// _fsdp_collectives.py): where a unit's shard is copied in and all-gathered, where the
// gathered bytes are copied out into the parameters, where gradients are copied into the
// reduction's input, and where reduced gradients are folded into the sharded .grad. The
// reductions themselves are grad_reducer.h's; buffer layouts are fsdp_param.h's.
// Called by FsdpUnit (fsdp_unit.h), which owns the protocol state.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "core/comm/communicator.h"
#include "core/fsdp/fsdp_param.h"

namespace fsdpp::fsdp {

// An issued all-gather and the buffer [S * shard_total] it fills. For a group of one the
// work is empty (its wait() returns at once) and the buffer may be the flat shard itself.
struct PendingGather {
  comm::CommWork work;
  at::Tensor output;
};

// Copy-in and all-gather of a unit's flat shard over `shard`: the shard goes as it is, or,
// with offload or mixed precision (`copy_in`), as a copy on `device` in `param_dtype`, so
// that the all-gather moves param_dtype bytes. Returns at once.
// A group of one runs no collective: the output is the shard itself where it is on
// `device` (in the master dtype: copy-out casts, and reads the shard when it runs, so the
// shard must not change until then; ShardedModel lets no all-gather outlive a backward),
// else its copy on `device` in `param_dtype`.
PendingGather all_gather_async(comm::Communicator& shard, const at::Tensor& flat_shard, bool copy_in, at::Device device,
                               at::ScalarType param_dtype);

// Copy-out: every parameter's rows of `gathered` into its unsharded tensor, without
// bumping autograd's version counter (the same tensors may be saved for backward and are
// refilled before it).
void all_gather_copy_out(std::vector<FsdpParam>& params, const at::Tensor& gathered, int64_t shard_total);

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

}  // namespace fsdpp::fsdp
