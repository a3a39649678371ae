#include "harness/oracle/collective_reference.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace fsdpp::harness {

at::Tensor rank_input(int rank, int64_t numel, at::ScalarType dtype, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed * 1000003ULL + static_cast<uint64_t>(rank));
  if (at::isFloatingType(dtype)) return at::randn({numel}, gen, at::kFloat).to(dtype);
  return at::randint(-1000, 1000, {numel}, gen, at::TensorOptions().dtype(at::kLong)).to(dtype);
}

std::vector<at::Tensor> all_rank_inputs(int world_size, int64_t numel, at::ScalarType dtype, uint64_t seed) {
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < world_size; ++r) inputs.push_back(rank_input(r, numel, dtype, seed));
  return inputs;
}

at::Tensor reference_all_gather(const std::vector<at::Tensor>& inputs) { return at::cat(inputs); }

at::Tensor reference_reduce(const std::vector<at::Tensor>& inputs, comm::ReduceOp op) {
  auto dtype = inputs.front().scalar_type();
  auto wide = at::isFloatingType(dtype) ? at::kDouble : at::kLong;
  at::Tensor acc = inputs.front().to(wide);
  for (size_t j = 1; j < inputs.size(); ++j) {
    auto x = inputs[j].to(wide);
    acc = op == comm::ReduceOp::Max ? at::maximum(acc, x) : acc + x;
  }
  if (op == comm::ReduceOp::Avg) acc = acc / static_cast<double>(inputs.size());
  return acc.to(dtype);
}

at::Tensor reference_all_to_all(const std::vector<at::Tensor>& inputs, const std::vector<std::vector<int64_t>>& splits,
                                int me) {
  std::vector<at::Tensor> pieces;
  for (size_t j = 0; j < inputs.size(); ++j) {
    int64_t offset = 0;
    for (int k = 0; k < me; ++k) offset += splits[j][k];
    pieces.push_back(inputs[j].narrow(0, offset, splits[j][me]));
  }
  return at::cat(pieces);
}

}  // namespace fsdpp::harness
