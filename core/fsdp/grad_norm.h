// The global norm of a sharded model's gradients, folded over its process groups.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "core/fsdp/fsdp_unit.h"

namespace fsdpp::fsdp {

// Collective over comms.shard: (sum over every parameter of ||g||_p^p)^(1/p), or the
// largest |element| for p = inf, over the gradient shards of `units` (replicas hold the
// same values, so the shard group alone partitions them), as a 0-dim fp64 tensor. Fast
// order: each shard's sum by optim::gradient_power_sum_on_device, one all-reduce, both on
// the gradients' device, which the host does not read. World-size-invariant order (comms.world
// set) and finite p: per-row sums of |g|^p in double by a plain sequential loop on the host,
// one all-gather, folded in global row order (a parameter's shards in shard-rank order,
// parameters in model order), so neither the shard boundaries nor the kernels change a
// bit (a CPU tensor; a device's gradients are read to the host). Throws
// std::invalid_argument unless p > 0.
at::Tensor sharded_grad_norm(const std::vector<std::shared_ptr<FsdpUnit>>& units, const UnitComms& comms,
                             double norm_type);

// The gradient shards of `units`' parameters, in unit and parameter order (undefined where
// a parameter has none).
std::vector<at::Tensor> sharded_gradients(const std::vector<std::shared_ptr<FsdpUnit>>& units);

}  // namespace fsdpp::fsdp
