// Single-process answers for collectives: what the group result must be, computed from
// every rank's input in one process. Inputs are a pure function of (rank, numel, dtype,
// seed), so each rank can rebuild all of them locally.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "core/comm/communicator.h"

namespace fsdpp::harness {

// Values: normal(0,1) for floating dtypes (rounded to the dtype), uniform integers in
// [-1000, 1000) for integer dtypes.
at::Tensor rank_input(int rank, int64_t numel, at::ScalarType dtype, uint64_t seed);
std::vector<at::Tensor> all_rank_inputs(int world_size, int64_t numel, at::ScalarType dtype, uint64_t seed);

// Concatenation in rank order.
at::Tensor reference_all_gather(const std::vector<at::Tensor>& inputs);
// Elementwise op over ranks, accumulated in float64 (int64 for integers) and rounded
// once to the inputs' dtype.
at::Tensor reference_reduce(const std::vector<at::Tensor>& inputs, comm::ReduceOp op);
// What rank `me` receives in all_to_all_single of 1-D inputs where rank j sends
// splits[j][k] elements to rank k.
at::Tensor reference_all_to_all(const std::vector<at::Tensor>& inputs, const std::vector<std::vector<int64_t>>& splits,
                                int me);

}  // namespace fsdpp::harness
