#include "core/runtime/device.h"

#include <fstream>
#include <stdexcept>

#include "core/runtime/cuda_plugin.h"

namespace fsdpp::runtime {

namespace {

// The CUDA plugin, for a call about CUDA `device`; throws std::logic_error naming the device
// when there is none (no CUDA tensor or device can exist without it).
const CudaPlugin* cuda_plugin_for(c10::Device device) {
  const CudaPlugin* plugin = cuda_plugin();
  if (plugin == nullptr)
    throw std::logic_error("fsdpp runtime: " + device.str() + " asked of a process without the CUDA plugin (" +
                           cuda_plugin_status() + ")");
  return plugin;
}

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
  const CudaPlugin* plugin = cuda_plugin();
  return plugin != nullptr ? plugin->device_count() : 0;
}

c10::Device parse_device(const std::string& text, const std::string& flag) {
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (text == "cuda" || text.rfind("cuda:", 0) == 0) {
    if (!cuda_available())
      throw std::invalid_argument(flag + " '" + text + "': this build/machine has no CUDA device" +
                                  (cuda_plugin() != nullptr
                                       ? std::string(" (CUDA plugin loaded, but no GPU is visible)")
                                       : " (CUDA plugin " + cuda_plugin_status() + ")"));
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
  if (device.is_cuda()) cuda_plugin_for(device)->set_device(device.has_index() ? device.index() : c10::DeviceIndex{0});
}

void synchronize(c10::Device device) {
  if (device.is_cuda()) cuda_plugin_for(device)->synchronize();
}

void synchronize_current_stream(c10::Device device) {
  if (device.is_cuda()) cuda_plugin_for(device)->synchronize_current_stream(device.index());  // -1: current device
}

bool current_stream_idle(c10::Device device) {
  return !device.is_cuda() || cuda_plugin_for(device)->current_stream_idle(device.index());
}

DeviceMemory device_memory(c10::Device device) {
  if (device.is_cuda()) return cuda_plugin_for(device)->device_memory(device);
  DeviceMemory m;
  m.allocated_bytes = m.reserved_bytes = proc_status_bytes("VmRSS");
  m.peak_allocated_bytes = m.peak_reserved_bytes = proc_status_bytes("VmHWM");
  return m;
}

void reset_peak_memory(c10::Device device) {
  if (device.is_cuda()) {
    cuda_plugin_for(device)->reset_peak_memory(device);
    return;
  }
  std::ofstream("/proc/self/clear_refs") << "5";
}

std::string device_name(c10::Device device) {
  if (device.is_cuda())
    return cuda_plugin_for(device)->device_name(device.has_index() ? device.index() : c10::DeviceIndex{0});
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
