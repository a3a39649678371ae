// Live and peak bytes of the CPU tensors a process allocates: the CPU's counterpart of the
// CUDA caching allocator's allocated_bytes (current and peak), so that a CPU benchmark cell
// can report tensor memory rather than the process's resident set.
//
// Contract:
// - What is counted: the bytes requested from LibTorch's CPU allocator (c10::GetCPUAllocator,
//   which at::empty and every CPU tensor's storage use) after install(), counted when the
//   storage is allocated and uncounted when it is freed. Not counted: memory that kernels
//   take from malloc themselves (MKL, oneDNN scratch not routed through the allocator),
//   the heap's own overhead, pinned host memory, CUDA memory.
// - Installation: install() wraps the CPU allocator current at that moment (LibTorch's
//   default) and makes the wrapper the CPU allocator with c10::SetCPUAllocator at priority
//   kInstallPriority. Install it before the tensors to be measured are allocated: only
//   storage allocated afterwards is counted. A block allocated before installation and
//   freed after it (through its own DataPtr, or through the raw interface that oneDNN
//   uses) goes to the allocator that made it and is not uncounted. install() is
//   idempotent and cannot be undone: blocks counted must be uncounted when freed.
// - Thread-safety: allocation and free may happen on any thread (autograd, the
//   communication thread); the counters are atomics and the table of counted blocks has a
//   mutex. reset_peak() races benignly with allocations on other threads (the peak then
//   includes them).
#pragma once

#include <cstdint>

namespace fsdpp::runtime {

class CountingCpuAllocator {
 public:
  // Above LibTorch's default CPU allocator (registered at priority 0).
  static constexpr uint8_t kInstallPriority = 100;

  // Installs the counter (see above). Throws std::runtime_error when the current CPU
  // allocator has no raw deleter (its context is not its data), which the counter needs.
  static void install();
  static bool installed();

  // Bytes of counted storage alive now.
  static int64_t live_bytes();
  // The most live_bytes() has been since installation or the last reset_peak().
  static int64_t peak_bytes();
  // Starts a new peak window: the peak becomes the bytes alive now.
  static void reset_peak();
};

}  // namespace fsdpp::runtime
