#include "core/fsdp/grad_norm.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

#include "core/optim/gradients.h"

namespace fsdpp::fsdp {

namespace {

// The world-size-invariant order's sum of |g|^p: each row's sum by a plain sequential
// loop in double (no vectorisation, no threads), all-gathered over the shard group, and
// folded in global row order (a parameter's shards in shard-rank order, parameters in
// model order), so that neither the shard boundaries nor the kernels change a bit. All
// units are on the flat-shard path in that order (fsdp_unit.cpp), rows = dim-0 slices.
double row_ordered_power_sum(const std::vector<std::shared_ptr<FsdpUnit>>& units, comm::Communicator& shard,
                             double norm_type) {
  int64_t rows_per_rank = 0;
  for (auto& unit : units)
    for (auto& p : unit->params()) rows_per_rank += p.layout().shard_rows;
  at::Tensor mine = at::zeros({rows_per_rank}, at::kDouble);
  double* sums = mine.data_ptr<double>();
  int64_t first = 0;
  for (auto& unit : units)
    for (auto& p : unit->params()) {
      const auto& g = p.sharded().grad();
      const int64_t row_numel = p.layout().row_numel;
      if (g.defined() && g.numel() > 0 && row_numel > 0) {
        at::Tensor values = g.detach().to(at::kCPU, at::kDouble).contiguous();
        const double* v = values.data_ptr<double>();
        for (int64_t r = 0; r < g.numel() / row_numel; ++r) {
          double sum = 0;
          for (int64_t k = 0; k < row_numel; ++k) {
            double a = std::abs(v[r * row_numel + k]);
            sum += norm_type == 2 ? a * a : std::pow(a, norm_type);
          }
          sums[first + r] = sum;
        }
      }
      first += p.layout().shard_rows;
    }
  const int s = shard.size();
  at::Tensor all = at::empty({s * rows_per_rank}, at::kDouble);
  shard.all_gather_into(all, mine);
  const double* gathered = all.data_ptr<double>();
  double total = 0;
  first = 0;
  for (auto& unit : units)
    for (auto& p : unit->params()) {
      for (int r = 0; r < s; ++r)
        for (int64_t row = 0; row < p.layout().valid_rows(r); ++row) total += gathered[r * rows_per_rank + first + row];
      first += p.layout().shard_rows;
    }
  return total;
}

}  // namespace

std::vector<at::Tensor> sharded_gradients(const std::vector<std::shared_ptr<FsdpUnit>>& units) {
  std::vector<at::Tensor> grads;
  for (auto& unit : units)
    for (auto& p : unit->params()) grads.push_back(p.sharded().grad());
  return grads;
}

at::Tensor sharded_grad_norm(const std::vector<std::shared_ptr<FsdpUnit>>& units, const UnitComms& comms,
                             double norm_type) {
  if (!(norm_type > 0)) throw std::invalid_argument("grad norm: norm_type must be > 0 or inf");
  bool inf = std::isinf(norm_type);
  // The maximum does not depend on the order; sums do.
  if (comms.world && !inf)
    return at::scalar_tensor(std::pow(row_ordered_power_sum(units, *comms.shard, norm_type), 1.0 / norm_type),
                             at::kDouble);
  // Stays where the gradients are: the all-reduce and the root run there, unread.
  auto total = optim::gradient_power_sum_on_device(sharded_gradients(units), norm_type).reshape({1});
  // Shards of one replica partition the gradients; replicas hold the same values.
  if (comms.shard->size() > 1) comms.shard->all_reduce(total, inf ? comm::ReduceOp::Max : comm::ReduceOp::Sum);
  return optim::norm_from_power_sum(total.reshape({}), norm_type);
}

}  // namespace fsdpp::fsdp
