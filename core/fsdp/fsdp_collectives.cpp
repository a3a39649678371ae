#include "core/fsdp/fsdp_collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace fsdpp::fsdp {

PendingGather all_gather_async(comm::Communicator& shard, const at::Tensor& flat_shard, bool copy_in, at::Device device,
                               at::ScalarType param_dtype) {
  if (shard.size() == 1) {
    // An all-gather over one rank is the identity: no collective and no call in the comm
    // stats (as ShardAverage skips the reduce-scatter of a group of one). A shard on
    // `device` is the gathered buffer itself, and copy-out casts it straight into the
    // unsharded parameters: one pass over the bytes instead of a cast, NCCL's copy and a
    // copy-out. A shard elsewhere (offload: pinned host memory) still goes over in one
    // asynchronous copy, cast to param_dtype on the way, as for a larger group.
    if (flat_shard.device() == device) return PendingGather{comm::CommWork(), flat_shard};
    return PendingGather{comm::CommWork(), flat_shard.to(device, param_dtype, /*non_blocking=*/true, /*copy=*/true)};
  }
  at::Tensor input = flat_shard;
  if (copy_in) input = flat_shard.to(device, param_dtype, /*non_blocking=*/true, /*copy=*/true);
  at::Tensor output = at::empty({flat_shard.numel() * shard.size()}, input.options());
  return PendingGather{shard.all_gather_into_async(output, input), output};
}

void all_gather_copy_out(std::vector<FsdpParam>& params, const at::Tensor& gathered, int64_t shard_total) {
  // variable_data(): writes that autograd does not see (no version bump).
  for (auto& p : params) p.copy_out(gathered, shard_total, p.unsharded().variable_data());
}

}  // namespace fsdpp::fsdp
