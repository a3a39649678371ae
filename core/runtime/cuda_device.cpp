#include "core/runtime/cuda_device.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <nccl.h>

namespace fsdpp::runtime::cuda {

namespace {

// The caching allocator's per-device state exists only after CUDA's lazy init (the first
// allocation); its statistics calls throw "Invalid device argument" before that.
c10::DeviceIndex initialised_cuda_index(c10::Device device) {
  (void)at::empty({0}, at::TensorOptions().device(device));
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

}  // namespace

int device_count() { return static_cast<int>(c10::cuda::device_count()); }

void set_device(c10::DeviceIndex index) { c10::cuda::set_device(index); }

void synchronize() { c10::cuda::device_synchronize(); }

void synchronize_current_stream(c10::DeviceIndex index) { at::cuda::getCurrentCUDAStream(index).synchronize(); }

bool current_stream_idle(c10::DeviceIndex index) { return at::cuda::getCurrentCUDAStream(index).query(); }

DeviceMemory device_memory(c10::Device device) {
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(initialised_cuda_index(device));
  const size_t all = 0;  // StatType::AGGREGATE: small and large pools together
  DeviceMemory m;
  m.allocated_bytes = stats.allocated_bytes[all].current;
  m.reserved_bytes = stats.reserved_bytes[all].current;
  m.peak_allocated_bytes = stats.allocated_bytes[all].peak;
  m.peak_reserved_bytes = stats.reserved_bytes[all].peak;
  return m;
}

void reset_peak_memory(c10::Device device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(initialised_cuda_index(device));
}

std::string device_name(c10::DeviceIndex index) { return at::cuda::getDeviceProperties(index)->name; }

int64_t device_total_memory(c10::DeviceIndex index) {
  return static_cast<int64_t>(at::cuda::getDeviceProperties(index)->totalGlobalMem);
}

std::string nccl_runtime_version() {
  int nccl = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess || nccl <= 0) return "";
  // NCCL_VERSION_CODE: X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z since.
  const int major = nccl >= 10000 ? nccl / 10000 : nccl / 1000;
  const int minor = nccl >= 10000 ? nccl / 100 % 100 : nccl / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(nccl % 100);
}

}  // namespace fsdpp::runtime::cuda
