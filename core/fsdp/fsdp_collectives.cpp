#include "core/fsdp/fsdp_collectives.h"

#include <ATen/ATen.h>

namespace fsdpp::fsdp {

PendingGather all_gather_async(comm::Communicator& shard, const at::Tensor& flat_shard, bool copy_in, at::Device device,
                               at::ScalarType param_dtype) {
  at::Tensor input = flat_shard;
  if (copy_in) input = flat_shard.to(device, param_dtype, /*non_blocking=*/true, /*copy=*/true);
  at::Tensor output = at::empty({flat_shard.numel() * shard.size()}, input.options());
  return PendingGather{shard.all_gather_into_async(output, input), output};
}

void all_gather_copy_out(std::vector<FsdpParam>& params, const at::Tensor& gathered, int64_t shard_total) {
  // variable_data(): writes that autograd does not see (no version bump).
  for (auto& p : params) p.copy_out(gathered, shard_total, p.unsharded().variable_data());
}

at::Tensor reduce_scatter_input(const std::vector<FsdpParam>& params, std::vector<at::Tensor>& accumulated,
                                const std::vector<bool>& has_grad, int64_t shard_total, int group_size,
                                const at::TensorOptions& options) {
  at::Tensor input = at::zeros({shard_total * group_size}, options);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!has_grad[i]) continue;
    params[i].copy_in_grad(accumulated[i], input, shard_total);
    accumulated[i] = at::Tensor();
  }
  return input;
}

at::Tensor replica_reduce_input(const std::vector<FsdpParam>& params, const std::vector<bool>& has_grad, int replicas) {
  int64_t total = 0;
  for (const auto& p : params) total += p.full_numel();
  const int64_t padded = (total + replicas - 1) / replicas * replicas;
  at::Tensor input = at::zeros({padded}, params.front().unsharded().options().requires_grad(false));
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (has_grad[i]) input.narrow(0, offset, p.full_numel()).copy_(p.unsharded().grad().reshape({-1}));
    offset += p.full_numel();
  }
  return input;
}

void fold_reduced_gradients(std::vector<FsdpParam>& params, const std::vector<bool>& has_grad,
                            const std::vector<at::Tensor>& reduced, bool replicated, bool from_zero,
                            const at::TensorOptions& master) {
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    const int64_t span = replicated ? p.full_numel() : p.layout().shard_numel();
    if (has_grad[i]) {
      if (replicated) {
        p.unsharded().mutable_grad() = reduced.front().narrow(0, offset, span).view(p.shape()).clone();
      } else {
        std::vector<int64_t> padded_shape = p.shape();
        if (padded_shape.empty()) padded_shape.push_back(1);
        padded_shape[0] = p.layout().shard_rows;
        // This parameter's rows of a reduced shard buffer, padding dropped.
        auto rows_in = [&](const at::Tensor& buffer) {
          return buffer.narrow(0, offset, span).view(padded_shape).narrow(0, 0, p.sharded().size(0));
        };
        auto& grad = p.sharded().mutable_grad();
        if (!grad.defined() && from_zero) grad = at::zeros(p.sharded().sizes(), master);
        for (const auto& buffer : reduced) {
          if (grad.defined())
            grad.add_(rows_in(buffer).to(grad.device(), grad.scalar_type()));
          else
            grad = rows_in(buffer).to(master, /*non_blocking=*/false, /*copy=*/true);
        }
      }
    }
    offset += span;
  }
}

}  // namespace fsdpp::fsdp
