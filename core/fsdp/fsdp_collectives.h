// A unit's parameters on their way from the communicator (compare FSDP2's
// _fsdp_collectives.py, its all-gather half): where a unit's shard is copied in and
// all-gathered, and where the gathered bytes are copied out into the parameters. The
// gradients' way back (packing, reduction, fold) is grad_reducer.h's; buffer layouts are
// fsdp_param.h's.
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

}  // namespace fsdpp::fsdp
