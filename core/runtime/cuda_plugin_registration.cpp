// libfsdpp_cuda.so's entry: its table (cuda_plugin.h), handed to fsdpp_core when the plugin
// is loaded.
#include <memory>

#include "core/comm/nccl_backend.h"
#include "core/kernels/cross_entropy_cuda.h"
#include "core/runtime/cuda_device.h"
#include "core/runtime/cuda_plugin.h"

namespace {

std::unique_ptr<fsdpp::comm::CollectiveBackend> make_nccl_backend(fsdpp::comm::GroupState& group) {
  return std::make_unique<fsdpp::comm::NcclBackend>(group);
}

fsdpp::runtime::CudaPlugin plugin_table() {
  namespace cuda = fsdpp::runtime::cuda;
  namespace kernels = fsdpp::kernels::cuda;
  fsdpp::runtime::CudaPlugin p{};
  p.device_count = cuda::device_count;
  p.set_device = cuda::set_device;
  p.synchronize = cuda::synchronize;
  p.synchronize_current_stream = cuda::synchronize_current_stream;
  p.current_stream_idle = cuda::current_stream_idle;
  p.device_memory = cuda::device_memory;
  p.reset_peak_memory = cuda::reset_peak_memory;
  p.device_name = cuda::device_name;
  p.device_total_memory = cuda::device_total_memory;
  p.nccl_runtime_version = cuda::nccl_runtime_version;
  p.make_nccl_backend = make_nccl_backend;
  p.cross_entropy_kernel_name = kernels::cross_entropy_kernel_name;
  p.has_fused_cross_entropy = kernels::has_fused_cross_entropy;
  p.fused_summed_cross_entropy = kernels::fused_summed_cross_entropy;
  return p;
}

const bool registered = (fsdpp::runtime::register_cuda_plugin(plugin_table()), true);

}  // namespace

// What the loader looks up to name the file it loaded (cuda_plugin_status()).
extern "C" __attribute__((visibility("default"))) const int fsdpp_cuda_plugin_marker = 1;
