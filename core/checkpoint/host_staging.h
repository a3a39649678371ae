// The host copy an asynchronous save writes from (CHECKPOINT.md, "Asynchronous save"): one
// buffer per tensor, kept between saves, as torch.distributed.checkpoint's DefaultStager with
// use_pinned_memory=True (torchtitan's async_with_pinned_mem) caches its staging storages.
//
// Rows on a CUDA device are staged into page-locked (pinned) host memory, so the
// device-to-host copies run at full PCIe speed; they are issued non_blocking on the
// source device's current stream, and stage() synchronises that stream once before it
// returns. Rows on the CPU (or any other device) are copied into pageable buffers: pinning
// needs CUDA. A buffer is reused while its tensor (by position in content.tensors) keeps
// its shape, dtype and kind of memory; otherwise it is reallocated.
//
// Memory: the buffers hold one copy of the rank's content in host memory for the life of
// this object (pinned for CUDA rows), not only while a save is pending.
// Thread-safety: stage() overwrites the buffers the previous stage() returned; the caller
// must be done with them (AsyncCheckpointSaver::save waits for the previous save first).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "core/checkpoint/checkpoint_writer.h"

namespace fsdpp::checkpoint {

// What one stage() copied.
struct StagedContent {
  CheckpointContent content;    // the caller's, rows replaced by host buffers (contiguous)
  int64_t bytes = 0;            // rows copied to host memory
  int64_t allocated_bytes = 0;  // buffers this call allocated (0: every buffer was reused)
  bool pinned = false;          // some rows came from a CUDA device (their copy is page-locked)
};

class HostStaging {
 public:
  // Copies every tensor's rows into this object's buffers; returns once the bytes are in
  // host memory, so the caller may then change the tensors. Same bytes, shapes and dtypes
  // as `rows.to(kCPU).contiguous()`; tensors without rows stay without.
  StagedContent stage(const CheckpointContent& content);

  // The buffers, in the last stage()'s tensor order (undefined for a tensor without rows):
  // for tests and telemetry (is_pinned, data_ptr); never write into them.
  std::vector<at::Tensor> buffers() const;

 private:
  struct Buffer {
    at::Tensor host;
    bool pinned = false;  // allocated page-locked (tracked here: Tensor::is_pinned asks CUDA)
  };
  std::vector<Buffer> buffers_;
};

}  // namespace fsdpp::checkpoint
