#include "core/runtime/device.h"

#include <fstream>
#include <stdexcept>

#if FSDPP_WITH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace fsdpp::runtime {

namespace {

#if FSDPP_WITH_CUDA
// The caching allocator's per-device state exists only after CUDA's lazy init (the first
// allocation); its statistics calls throw "Invalid device argument" before that.
c10::DeviceIndex initialised_cuda_index(c10::Device device) {
  (void)at::empty({0}, at::TensorOptions().device(device));
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
#endif

// A "Name:   123 kB" line of /proc/self/status, in bytes (0 if absent).
int64_t proc_status_bytes(const std::string& name) {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == name + ":") {
      int64_t kb = 0;
      status >> kb;
      return kb * 1024;
    }
    std::getline(status, key);
  }
  return 0;
}

}  // namespace

bool cuda_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
#if FSDPP_WITH_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

c10::Device parse_device(const std::string& text, const std::string& flag) {
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (text == "cuda" || text.rfind("cuda:", 0) == 0) {
    if (!cuda_available())
      throw std::invalid_argument(flag + " '" + text + "': this build/machine has no CUDA device" +
#if FSDPP_WITH_CUDA
                                  std::string(" (CUDA build, but no GPU is visible)")
#else
                                  std::string(" (CPU build: configure against a CUDA LibTorch, see ci/gpu.sh)")
#endif
      );
    int index = 0;
    if (text.size() > 5) {
      try {
        index = std::stoi(text.substr(5));
      } catch (const std::exception&) {
        throw std::invalid_argument(flag + " '" + text + "': expected cuda:N");
      }
    }
    if (index < 0 || index >= cuda_device_count())
      throw std::invalid_argument(flag + " '" + text + "': there are " + std::to_string(cuda_device_count()) +
                                  " CUDA devices");
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  throw std::invalid_argument(flag + " '" + text + "': expected cpu, cuda or cuda:N");
}

c10::ScalarType parse_compute_dtype(const std::string& name, const std::string& flag) {
  if (name == "fp32") return c10::kFloat;
  if (name == "bf16") return c10::kBFloat16;
  if (name == "fp16") return c10::kHalf;
  throw std::invalid_argument(flag + " '" + name + "': expected fp32, bf16 or fp16");
}

void set_current_device(c10::Device device) {
#if FSDPP_WITH_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.has_index() ? device.index() : c10::DeviceIndex{0});
#else
  (void)device;
#endif
}

void synchronize(c10::Device device) {
#if FSDPP_WITH_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

void synchronize_current_stream(c10::Device device) {
#if FSDPP_WITH_CUDA
  if (device.is_cuda()) at::cuda::getCurrentCUDAStream(device.index()).synchronize();  // index -1: current device
#else
  (void)device;
#endif
}

bool current_stream_idle(c10::Device device) {
#if FSDPP_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getCurrentCUDAStream(device.index()).query();
#else
  (void)device;
#endif
  return true;
}

DeviceMemory device_memory(c10::Device device) {
  DeviceMemory m;
#if FSDPP_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(initialised_cuda_index(device));
    const size_t all = 0;  // StatType::AGGREGATE: small and large pools together
    m.allocated_bytes = stats.allocated_bytes[all].current;
    m.reserved_bytes = stats.reserved_bytes[all].current;
    m.peak_allocated_bytes = stats.allocated_bytes[all].peak;
    m.peak_reserved_bytes = stats.reserved_bytes[all].peak;
    return m;
  }
#endif
  (void)device;
  m.allocated_bytes = m.reserved_bytes = proc_status_bytes("VmRSS");
  m.peak_allocated_bytes = m.peak_reserved_bytes = proc_status_bytes("VmHWM");
  return m;
}

void reset_peak_memory(c10::Device device) {
#if FSDPP_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(initialised_cuda_index(device));
    return;
  }
#endif
  (void)device;
  std::ofstream("/proc/self/clear_refs") << "5";
}

std::string device_name(c10::Device device) {
#if FSDPP_WITH_CUDA
  if (device.is_cuda())
    return at::cuda::getDeviceProperties(device.has_index() ? device.index() : c10::DeviceIndex{0})->name;
#endif
  (void)device;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "cpu";
}

}  // namespace fsdpp::runtime
