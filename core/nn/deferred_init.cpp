#include "core/nn/deferred_init.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/variable.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <mutex>
#include <stdexcept>

namespace fsdpp::nn {

namespace {
thread_local int active_depth = 0;  // DeferredInit objects alive on this thread
}  // namespace

DeferredInit::DeferredInit() { ++active_depth; }
DeferredInit::~DeferredInit() { --active_depth; }

bool deferred_init_active() { return active_depth > 0; }

void release_to_meta(torch::nn::Module& part) {
  if (!deferred_init_active()) return;
  for (const auto& p : part.parameters(/*recurse=*/true)) {
    if (!p.defined() || p.is_meta()) continue;  // a tie seen before, or a part released twice
    set_data_across_devices(p, at::empty(p.sizes(), p.options().device(at::kMeta)));
  }
#if defined(__GLIBC__)
  // glibc serves allocations below its dynamic mmap threshold (raised up to 32 MiB by the
  // first such free) from the heap and keeps them there when freed; small allocations made
  // meanwhile land in those holes, so the next part does not fit in them and the heap grows
  // part after part (Llama 125M: a peak of 57% of the model instead of the embedding's 22%).
  // Trimming hands the freed pages back, so resident memory stays at one part.
  ::malloc_trim(0);
#endif
}

void set_data_across_devices(const at::Tensor& param, const at::Tensor& data) {
  if (at::_has_compatible_shallow_copy_type(param, data)) {
    param.set_data(data);
    return;
  }
  // The rest of VariableTypeManual's set_data (torch/csrc/autograd/VariableTypeManual.cpp),
  // whose compatibility check would refuse meta <-> CPU.
  if (param.requires_grad() && !torch::autograd::isDifferentiableType(data.scalar_type()))
    throw std::invalid_argument("set_data_across_devices: a parameter that requires grad cannot take " +
                                std::string(c10::toString(data.scalar_type())) + " data");
  if (auto* autograd = torch::autograd::impl::get_autograd_meta(param)) {
    std::lock_guard<std::mutex> lock(autograd->mutex_);
    autograd->grad_accumulator_.reset();  // it was made for the old device
  }
  param.unsafeGetTensorImpl()->shallow_copy_from(data.getIntrusivePtr());
}

}  // namespace fsdpp::nn
