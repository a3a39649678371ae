#include "core/comm/host_staged_backend.h"

#include <ATen/ATen.h>

#include <mutex>

#include "core/comm/comm_work_state.h"

namespace fsdpp::comm {

namespace {

// A host tensor shaped and typed as `device_tensor`.
at::Tensor host_like(const at::Tensor& device_tensor) {
  return at::empty(device_tensor.sizes(), device_tensor.options().device(at::kCPU));
}

// `work` (a collective into `host_out`), whose first successful wait() copies `host_out`
// into `device_out`.
CommWork copy_back_on_wait(CommWork work, at::Tensor device_out, at::Tensor host_out) {
  if (const auto& state = CommWorkAccess::state(work)) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->on_wait = [device_out, host_out]() mutable { device_out.copy_(host_out); };
  }
  return work;
}

}  // namespace

CommWork HostStagedBackend::all_gather_into(at::Tensor output, at::Tensor input, const std::string& what) {
  at::Tensor host_out = host_like(output);
  return copy_back_on_wait(host_.all_gather_into(host_out, input.cpu(), what), output, host_out);
}

CommWork HostStagedBackend::reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op, const std::string& what) {
  at::Tensor host_out = host_like(output);
  return copy_back_on_wait(host_.reduce_scatter(host_out, input.cpu(), op, what), output, host_out);
}

CommWork HostStagedBackend::all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what) {
  at::Tensor host = tensor.cpu();
  return copy_back_on_wait(host_.all_reduce(host, op, what), tensor, host);
}

CommWork HostStagedBackend::broadcast(at::Tensor tensor, int root, const std::string& what) {
  at::Tensor host = tensor.cpu();
  return copy_back_on_wait(host_.broadcast(host, root, what), tensor, host);
}

CommWork HostStagedBackend::all_to_all_single(at::Tensor output, at::Tensor input, const AllToAllRows& rows,
                                              const std::string& what) {
  at::Tensor host_out = host_like(output);
  return copy_back_on_wait(host_.all_to_all_single(host_out, input.cpu(), rows, what), output, host_out);
}

}  // namespace fsdpp::comm
