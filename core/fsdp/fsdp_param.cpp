#include "core/fsdp/fsdp_param.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include <stdexcept>

#include "core/nn/deferred_init.h"

namespace fsdpp::fsdp {

FsdpParam::FsdpParam(std::string name, at::Tensor module_param, int group_size, int group_rank, bool in_place)
    : name_(std::move(name)),
      shape_(module_param.sizes().vec()),
      layout_(ShardLayout::of(module_param.sizes().vec(), group_size)),
      rank_(group_rank),
      in_place_(in_place),
      unsharded_(std::move(module_param)) {
  if (!unsharded_.is_meta() &&
      (!unsharded_.is_contiguous() || unsharded_.storage_offset() != 0 ||
       unsharded_.storage().nbytes() != static_cast<size_t>(unsharded_.numel() * unsharded_.element_size())))
    throw std::invalid_argument("fully_shard: parameter '" + name_ +
                                "' must be contiguous and own its whole storage (is it a view?)");
  if (in_place_) sharded_ = unsharded_;
}

namespace {

// Shape of `rows` rows of a parameter of shape `shape` (a 0-d parameter is one row).
std::vector<int64_t> rows_shape(std::vector<int64_t> shape, int64_t rows) {
  if (shape.empty()) shape.push_back(1);
  shape[0] = rows;
  return shape;
}

void require_source(const RowSource& source, const std::string& name) {
  if (!source)
    throw std::invalid_argument("fully_shard: parameter '" + name +
                                "' is on the meta device; give FsdpOptions::materialize or sync_module_states");
}

}  // namespace

void FsdpParam::bind_shard(const at::Tensor& padded_shard, int64_t offset, at::ScalarType compute_dtype,
                           at::Device meta_device, const RowSource& source) {
  offset_ = offset;
  int64_t rows = layout_.valid_rows(rank_);
  auto rows_view = padded_shard.view({layout_.shard_rows, layout_.row_numel});
  rows_view.zero_();
  if (unsharded_.is_meta()) {
    require_source(source, name_);
    if (rows > 0) {
      // Sources write host memory (CPU generators, file mappings); device shards get a copy.
      auto dst = rows_view.narrow(0, 0, rows).view(rows_shape(shape_, rows));
      auto host = dst.is_cpu() ? dst : at::empty(dst.sizes(), dst.options().device(at::kCPU));
      source(name_, shape_, layout_.first_row(rank_), host);
      if (!host.is_same(dst)) dst.copy_(host);
    }
  } else if (rows > 0) {
    auto full = unsharded_.detach().reshape({layout_.dim0, layout_.row_numel});
    rows_view.narrow(0, 0, rows).copy_(full.narrow(0, layout_.first_row(rank_), rows));
  }
  sharded_ = padded_shard.view(rows_shape(shape_, layout_.shard_rows)).narrow(0, 0, rows).detach();
  sharded_.set_requires_grad(unsharded_.requires_grad());
  // The module's tensor object stays (autograd and the forward refer to it); only its
  // data changes: to compute_dtype (mixed precision, like FSDP1's `param.data = ...`) and
  // off the meta device.
  if (compute_dtype != unsharded_.scalar_type() || unsharded_.is_meta()) {
    const auto device = unsharded_.is_meta() ? meta_device : unsharded_.device();
    nn::set_data_across_devices(unsharded_, at::empty(shape_, at::TensorOptions().device(device).dtype(compute_dtype)));
  }
  free_unsharded();
}

void FsdpParam::materialize_in_place(const RowSource& source, at::Device device) {
  if (!unsharded_.is_meta()) return;
  require_source(source, name_);
  auto full = at::empty(shape_, unsharded_.options().device(at::kCPU));
  source(name_, shape_, 0, full.view(rows_shape(shape_, layout_.dim0)));
  nn::set_data_across_devices(unsharded_, full.to(device));
  sharded_ = unsharded_;
}

void FsdpParam::alloc_unsharded() {
  auto* storage = unsharded_.storage().unsafeGetStorageImpl();
  size_t bytes = static_cast<size_t>(unsharded_.numel() * unsharded_.element_size());
  if (storage->nbytes() >= bytes && storage->data() != nullptr) return;
  // Storage over external memory (a parameter loaded zero-copy from a file mapping) has
  // no allocator of its own: its unsharded copies come from the device's default one.
  c10::Allocator* allocator = storage->allocator();
  if (allocator == nullptr) allocator = c10::GetAllocator(unsharded_.device().type());
  storage->set_data_ptr_noswap(allocator->allocate(bytes));
  storage->set_nbytes(bytes);
}

void FsdpParam::free_unsharded() {
  auto* storage = unsharded_.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, unsharded_.device()));
  storage->set_nbytes(0);
}

bool FsdpParam::unsharded_allocated() const { return unsharded_.storage().nbytes() > 0 || unsharded_.numel() == 0; }

int64_t FsdpParam::unsharded_bytes() const { return unsharded_.numel() * unsharded_.element_size(); }

void FsdpParam::copy_out(const at::Tensor& gathered, int64_t shard_total, at::Tensor full) const {
  auto dst = full.reshape({layout_.dim0, layout_.row_numel});
  for (int r = 0; r < layout_.group_size; ++r) {
    int64_t rows = layout_.valid_rows(r);
    if (rows == 0) continue;
    auto src = gathered.narrow(0, r * shard_total + offset_, rows * layout_.row_numel);
    dst.narrow(0, layout_.first_row(r), rows).copy_(src.view({rows, layout_.row_numel}));
  }
}

void FsdpParam::copy_in_grad(const at::Tensor& grad, at::Tensor rs_input, int64_t shard_total) const {
  auto src = grad.reshape({layout_.dim0, layout_.row_numel});
  for (int r = 0; r < layout_.group_size; ++r) {
    int64_t rows = layout_.valid_rows(r);
    if (rows == 0) continue;
    auto dst = rs_input.narrow(0, r * shard_total + offset_, rows * layout_.row_numel);
    dst.view({rows, layout_.row_numel}).copy_(src.narrow(0, layout_.first_row(r), rows));
  }
}

}  // namespace fsdpp::fsdp
