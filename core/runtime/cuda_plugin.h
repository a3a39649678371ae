// fsdpp's CUDA code as a plugin: libfsdpp_cuda.so holds everything that links LibTorch's
// CUDA libraries (the device queries and memory counters, the NCCL backend, the fused
// kernels), and fsdpp_core reaches it only through the table below.
//
// Why: loading libtorch_cuda and the CUDA libraries it needs (cuBLAS, cuDNN, NCCL, ...) costs
// every process start about 0.25 s of CPU, on a machine that has no GPU as on one that has.
// fsdpp and the test binaries link only libtorch_cpu and libc10; a CUDA build loads the plugin
// before main() when the machine has a CUDA driver, and never otherwise.
//
// When: a static initializer of fsdpp_core (linked into every program that links the core)
// calls load_cuda_plugin(). It must run before anything asks LibTorch about CUDA:
// at::detail::getCUDAHooks() keeps the first answer for the life of the process, and a
// query made before libtorch_cuda is loaded would leave the process without CUDA.
//
// Which: FSDPP_CUDA_PLUGIN in the environment decides:
// - unset or "auto": load when the CUDA driver (libcuda.so.1) can be opened;
// - "on": load whatever the driver (a CPU machine then has the plugin and no device);
// - "off": never load;
// - a path (containing '/'): load that file, whatever the driver.
// The plugin is found by its file name, libfsdpp_cuda.so, through the program's RUNPATH
// (the build tree's core/ folder; <prefix>/lib when installed). A plugin that was asked for
// and cannot be loaded is not fatal here: cuda_plugin_status() says why, and the first use of
// a CUDA device fails with that reason (parse_device).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/device.h"

namespace fsdpp::comm {
class CollectiveBackend;
struct GroupState;
}  // namespace fsdpp::comm

namespace fsdpp::runtime {

// What the plugin provides. Every entry is set; the CUDA-device entries take a device the
// caller has checked is CUDA.
struct CudaPlugin {
  int (*device_count)();
  void (*set_device)(c10::DeviceIndex index);
  void (*synchronize)();                                       // the current device
  void (*synchronize_current_stream)(c10::DeviceIndex index);  // -1: the current device
  bool (*current_stream_idle)(c10::DeviceIndex index);         // -1: the current device
  DeviceMemory (*device_memory)(c10::Device device);
  void (*reset_peak_memory)(c10::Device device);
  std::string (*device_name)(c10::DeviceIndex index);
  int64_t (*device_total_memory)(c10::DeviceIndex index);
  // The NCCL library's version as it reports it at run time ("2.27.7"), or "" when it cannot.
  std::string (*nccl_runtime_version)();
  // The NCCL backend of one group (core/comm/nccl_backend.h).
  std::unique_ptr<comm::CollectiveBackend> (*make_nccl_backend)(comm::GroupState& group);
  // core/kernels/cross_entropy.h's calls for CUDA logits.
  const char* (*cross_entropy_kernel_name)(at::Device device);
  bool (*has_fused_cross_entropy)(const at::Tensor& logits);
  at::Tensor (*fused_summed_cross_entropy)(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index);
};

// Loads the plugin once, as FSDPP_CUDA_PLUGIN says (above); later calls return at once.
// Thread-safe.
void load_cuda_plugin();

// The loaded plugin's table, or null (a CPU-only build, no driver, "off", or a failed load).
// Calls load_cuda_plugin() first.
const CudaPlugin* cuda_plugin();

// Why the plugin is or is not loaded, in one clause for messages: "loaded from <path>", "not
// loaded: no CUDA driver (libcuda.so.1) on this machine", "not loaded: <dlerror>", ...
std::string cuda_plugin_status();

// "" when FSDPP_CUDA_PLUGIN is unset or one of the forms above; else one line naming the
// variable, its value and what was expected (fsdpp's main refuses to run with it).
std::string cuda_plugin_setting_error();

// Which engine carries the NCCL backend's collectives (core/comm/nccl_group.h), from
// FSDPP_NCCL_ENGINE: unset or "c10d": c10d's ProcessGroupNCCL, as PyTorch runs NCCL;
// "fsdpp": fsdpp's own over a raw ncclComm_t. nccl_engine() throws std::invalid_argument
// with nccl_engine_setting_error()'s line for any other value.
enum class NcclEngine { C10d, Fsdpp };
NcclEngine nccl_engine();
std::string nccl_engine_setting_error();
// "c10d ProcessGroupNCCL" or "fsdpp's own NCCL group (FSDPP_NCCL_ENGINE=fsdpp)".
std::string nccl_engine_name();

// Called by the plugin's static initializer, while load_cuda_plugin() waits in dlopen.
void register_cuda_plugin(const CudaPlugin& plugin);

}  // namespace fsdpp::runtime
