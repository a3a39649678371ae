// The compute device as fsdpp's telemetry and benchmarks see it: memory, synchronisation
// and names, for the CPU and (in CUDA builds) CUDA devices.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace fsdpp::runtime {

// Memory of one device, bytes. CUDA: the caching allocator's counters (what the seeds'
// get_mem_stats read: torch.cuda.memory_allocated / memory_reserved / max_*). CPU: the
// process's resident set (allocated = reserved = VmRSS, peaks = VmHWM).
struct DeviceMemory {
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
};

// True in a CUDA build that sees at least one GPU.
bool cuda_available();
int cuda_device_count();

// Parses "cpu", "cuda", "cuda:N"; throws std::invalid_argument naming `flag` otherwise, or
// when CUDA is asked for and not available.
c10::Device parse_device(const std::string& text, const std::string& flag);

// Makes `device` the current CUDA device of this thread (no-op for the CPU).
void set_current_device(c10::Device device);

// Compute dtype as the CLI spells it: fp32, bf16, fp16. Throws std::invalid_argument naming
// `flag` otherwise.
c10::ScalarType parse_compute_dtype(const std::string& name, const std::string& flag);

// Blocks until the device finished queued work (no-op on the CPU).
void synchronize(c10::Device device);

// Blocks until the work queued so far on this thread's current stream of `device` finished
// (CUDA: at::cuda::getCurrentCUDAStream(index).synchronize(); other streams are not waited
// for); no-op on the CPU.
void synchronize_current_stream(c10::Device device);

// Whether this thread's current stream of `device` has finished all work queued on it so
// far, without waiting (CUDA: the stream's query()); true on the CPU, which queues nothing.
bool current_stream_idle(c10::Device device);

DeviceMemory device_memory(c10::Device device);
// Starts a new peak window (CUDA: resetPeakStats; CPU: clear_refs 5 resets VmHWM).
void reset_peak_memory(c10::Device device);

// "NVIDIA H100 80GB HBM3", or the CPU model from /proc/cpuinfo.
std::string device_name(c10::Device device);

}  // namespace fsdpp::runtime
