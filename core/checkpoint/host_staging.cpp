#include "core/checkpoint/host_staging.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/runtime/device.h"

namespace fsdpp::checkpoint {

StagedContent HostStaging::stage(const CheckpointContent& content) {
  StagedContent out;
  out.content.optimizer = content.optimizer;
  out.content.mesh = content.mesh;
  out.content.tensors.reserve(content.tensors.size());
  buffers_.resize(content.tensors.size());
  // The CUDA devices whose current stream holds queued copies into pinned buffers.
  std::vector<c10::Device> queued_on;
  try {
    for (size_t i = 0; i < content.tensors.size(); ++i) {
      CheckpointTensor staged = content.tensors[i];
      Buffer& buffer = buffers_[i];
      if (!staged.rows.defined()) {
        buffer = {};
        out.content.tensors.push_back(std::move(staged));
        continue;
      }
      const at::Tensor rows = staged.rows.detach();  // copy_ records no autograd history
      const bool pin = rows.is_cuda();
      const int64_t bytes = rows.numel() * static_cast<int64_t>(rows.element_size());
      if (!buffer.host.defined() || buffer.pinned != pin || buffer.host.sizes() != rows.sizes() ||
          buffer.host.scalar_type() != rows.scalar_type()) {
        buffer.host = at::Tensor();  // the old buffer goes first: at most one copy is held
        buffer.host = at::empty(rows.sizes(), at::TensorOptions().dtype(rows.scalar_type()).pinned_memory(pin));
        buffer.pinned = pin;
        out.allocated_bytes += bytes;
      }
      // CUDA: cudaMemcpyAsync into page-locked memory on the current stream, after the
      // kernels that produced the rows; synchronised below, once for all tensors.
      buffer.host.copy_(rows, /*non_blocking=*/pin);
      if (pin && std::find(queued_on.begin(), queued_on.end(), rows.device()) == queued_on.end())
        queued_on.push_back(rows.device());
      out.bytes += bytes;
      out.pinned = out.pinned || pin;
      staged.rows = buffer.host;
      out.content.tensors.push_back(std::move(staged));
    }
  } catch (...) {
    // No copy may still be landing in a buffer once stage() has returned, even by throwing.
    for (const auto& device : queued_on) runtime::synchronize_current_stream(device);
    throw;
  }
  // save()'s promise: once this returns the staged bytes are final, and the caller may
  // change the tensors (the next optimizer step, queued on the same stream, would anyway
  // run after the copies; the host writer thread would not wait for them).
  for (const auto& device : queued_on) runtime::synchronize_current_stream(device);
  return out;
}

std::vector<at::Tensor> HostStaging::buffers() const {
  std::vector<at::Tensor> out;
  out.reserve(buffers_.size());
  for (const auto& b : buffers_) out.push_back(b.host);
  return out;
}

}  // namespace fsdpp::checkpoint
