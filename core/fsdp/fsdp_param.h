// One parameter's life under FSDP (compare FSDP2's FSDPParam).
//
// The unsharded parameter is the module's own tensor object: autograd and the module's
// forward keep referring to it, while its storage is allocated when the unit unshards
// and released (0 bytes) when it reshards. The sharded parameter is a new leaf tensor,
// the rank's rows of the parameter, living in the unit's flat shard buffer; it is what
// the optimizer updates.
//
// Layout of a unit's flat buffers (group of S ranks, parameters p in unit order):
//   shard buffer (per rank):        [ p0 padded shard | p1 padded shard | ... ]  S_total
//   all-gather output:              [ rank 0 shard buffer | rank 1 | ... ]       S * S_total
//   reduce-scatter input:           same layout as the all-gather output
// Padded shard of p on rank r = rows [r*shard_rows, (r+1)*shard_rows) of p, zero rows
// past dim0 (see sharding.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "core/fsdp/sharding.h"

namespace fsdpp::fsdp {

// Writes rows [first_row, first_row + out.size(0)) of parameter `name` (full shape
// `shape`) into `out` (deferred initialisation; see FsdpOptions::materialize).
using RowSource =
    std::function<void(const std::string& name, const std::vector<int64_t>& shape, int64_t first_row, at::Tensor out)>;

class FsdpParam {
 public:
  // module_param must own its whole storage (contiguous, offset 0). In place (a group of
  // one without mixed precision or offload: NO_SHARD, or any strategy on one rank)
  // nothing is sharded and the module's tensor is also the sharded parameter.
  FsdpParam(std::string name, at::Tensor module_param, int group_size, int group_rank, bool in_place);

  const std::string& name() const { return name_; }
  const ShardLayout& layout() const { return layout_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  bool replicated() const { return in_place_; }
  int64_t full_numel() const { return layout_.dim0 * layout_.row_numel; }

  at::Tensor& unsharded() { return unsharded_; }
  at::Tensor& sharded() { return sharded_; }
  const at::Tensor& unsharded() const { return unsharded_; }
  const at::Tensor& sharded() const { return sharded_; }
  // Element offset of this parameter's padded shard in the unit's shard buffer.
  int64_t offset() const { return offset_; }

  // Sharded mode: takes `padded_shard` (a [shard_numel] view into the unit's flat shard
  // buffer at `offset`, possibly in host memory), fills it with this rank's rows of the
  // current full value, makes the sharded leaf, and releases the full storage. The
  // module's tensor then holds `compute_dtype` values when unsharded (mixed precision:
  // FSDP2's param_dtype), while the shard keeps the original dtype (the master copy).
  // A parameter on the meta device takes its rows from `source` instead and computes on
  // `meta_device`.
  void bind_shard(const at::Tensor& padded_shard, int64_t offset, at::ScalarType compute_dtype,
                  at::Device meta_device = at::kCPU, const RowSource& source = {});
  // In-place mode with a meta parameter: gives the module's tensor its full value on
  // `device`.
  void materialize_in_place(const RowSource& source, at::Device device = at::kCPU);

  // Storage of the unsharded tensor: allocate (content undefined) / release.
  void alloc_unsharded();
  void free_unsharded();
  bool unsharded_allocated() const;
  int64_t unsharded_bytes() const;

  // gathered: [S * S_total] all-gather output. Writes every rank's rows into `full`
  // (a tensor of shape()). Does not touch autograd's version counter.
  void copy_out(const at::Tensor& gathered, int64_t shard_total, at::Tensor full) const;
  // grad: the full gradient (shape()), any dtype (copy_ casts to rs_input's). Writes rank
  // r's rows into rs_input[r*S_total + offset ...] for every r; padding rows are not
  // written (reduce_scatter_input zeroes them).
  void copy_in_grad(const at::Tensor& grad, at::Tensor rs_input, int64_t shard_total) const;

 private:
  std::string name_;
  std::vector<int64_t> shape_;
  ShardLayout layout_;
  int rank_ = 0;
  bool in_place_ = false;
  int64_t offset_ = 0;
  at::Tensor unsharded_;
  at::Tensor sharded_;
};

}  // namespace fsdpp::fsdp
