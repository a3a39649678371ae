// The CUDA side of device.h, in the CUDA plugin (cuda_plugin.h): device.cpp calls these
// through the plugin's table for CUDA devices. Each takes a CUDA device index (-1 where noted:
// the current device).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "core/runtime/device.h"

namespace fsdpp::runtime::cuda {

int device_count();
void set_device(c10::DeviceIndex index);
void synchronize();                                       // the current device
void synchronize_current_stream(c10::DeviceIndex index);  // -1: the current device
bool current_stream_idle(c10::DeviceIndex index);         // -1: the current device
// The caching allocator's counters (torch.cuda.memory_allocated, memory_reserved, max_*).
DeviceMemory device_memory(c10::Device device);
void reset_peak_memory(c10::Device device);
std::string device_name(c10::DeviceIndex index);
int64_t device_total_memory(c10::DeviceIndex index);
// ncclGetVersion's answer as "X.Y.Z", or "" when NCCL cannot say.
std::string nccl_runtime_version();

}  // namespace fsdpp::runtime::cuda
