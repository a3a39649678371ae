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

namespace {

using Span = std::pair<int64_t, int64_t>;  // [begin, end) elements of one rank's chunk

// The spans of rank r's chunk [0, shard_total) of the reduce-scatter input that no gradient
// is copied into: the gaps between parameters' shards, every parameter's padding rows,
// parameters without a gradient and the tail; adjacent ones merged, in offset order.
// `by_offset`: the parameters' indices sorted by offset (their shards do not overlap).
std::vector<Span> unwritten_spans(const std::vector<FsdpParam>& params, const std::vector<size_t>& by_offset,
                                  const std::vector<bool>& has_grad, int64_t shard_total, int r) {
  std::vector<Span> spans;
  int64_t cursor = 0;  // end of the last written rows
  for (size_t i : by_offset) {
    const auto& layout = params[i].layout();
    const int64_t written = has_grad[i] ? layout.valid_rows(r) * layout.row_numel : 0;
    if (written == 0) continue;
    if (params[i].offset() > cursor) spans.emplace_back(cursor, params[i].offset());
    cursor = params[i].offset() + written;
  }
  if (cursor < shard_total) spans.emplace_back(cursor, shard_total);
  return spans;
}

// Zeroes what copy_in_grad does not write, so that the buffer is the zero-padded layout
// without a full zero-fill first (most of it is overwritten at once): one fill per span,
// and where every rank's chunk has the same spans (no uneven padding), one strided fill
// per span across all ranks.
void zero_unwritten(const std::vector<FsdpParam>& params, const std::vector<bool>& has_grad, int64_t shard_total,
                    int group_size, at::Tensor& input) {
  std::vector<size_t> by_offset(params.size());
  for (size_t i = 0; i < params.size(); ++i) by_offset[i] = i;
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [&](size_t a, size_t b) { return params[a].offset() < params[b].offset(); });
  int64_t end = 0;
  for (size_t i : by_offset) {
    const auto& p = params[i];
    if (p.layout().shard_numel() == 0) continue;  // holds no element, overlaps nothing
    if (p.offset() < end || p.offset() + p.layout().shard_numel() > shard_total)
      throw std::logic_error("reduce_scatter_input: parameter '" + p.name() + "' at offset " +
                             std::to_string(p.offset()) + " (" + std::to_string(p.layout().shard_numel()) +
                             " elements) overlaps another's shard or lies past the shard total " +
                             std::to_string(shard_total));
    end = p.offset() + p.layout().shard_numel();
  }
  std::vector<std::vector<Span>> spans;
  spans.reserve(group_size);
  for (int r = 0; r < group_size; ++r) spans.push_back(unwritten_spans(params, by_offset, has_grad, shard_total, r));
  if (std::all_of(spans.begin(), spans.end(), [&](const auto& s) { return s == spans.front(); })) {
    const at::Tensor chunks = input.view({group_size, shard_total});
    for (const auto& [begin, stop] : spans.front()) chunks.narrow(1, begin, stop - begin).zero_();
    return;
  }
  for (int r = 0; r < group_size; ++r)
    for (const auto& [begin, stop] : spans[r]) input.narrow(0, r * shard_total + begin, stop - begin).zero_();
}

}  // namespace

at::Tensor reduce_scatter_input(const std::vector<FsdpParam>& params, std::vector<at::Tensor>& accumulated,
                                const std::vector<bool>& has_grad, int64_t shard_total, int group_size,
                                const at::TensorOptions& options) {
  at::Tensor input = at::empty({shard_total * group_size}, options);
  zero_unwritten(params, has_grad, shard_total, group_size, input);
  // copy_in_grad's copy_ casts a gradient still in the compute dtype (one reduced in the
  // backward that produced it) to the reduce dtype while it packs.
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
          if (grad.defined()) {
            grad.add_(rows_in(buffer).to(grad.device(), grad.scalar_type()));
          } else {
            // A lone buffer is the gradient: its copy may stay in flight (to pinned host
            // memory when offloaded, as FSDP2's non-blocking D2H of each reduced
            // gradient). Another buffer to add reads it on the host at once: blocking.
            grad = rows_in(buffer).to(master, /*non_blocking=*/reduced.size() == 1, /*copy=*/true);
          }
        }
      }
    }
    offset += span;
  }
}

}  // namespace fsdpp::fsdp
