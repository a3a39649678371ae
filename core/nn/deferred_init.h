// Deferred initialisation: building a model without holding all of its weights at once.
//
// Model constructors hand each finished part (an embedding, a transformer block, a final
// norm, ...) to release_to_meta. Outside a DeferredInit that does nothing; inside one, the
// part's parameters lose their values and keep only shape and dtype, on the meta device, so
// a model built that way needs the memory of its largest part, not of the whole model. Who
// builds the model then gives the parameters their values (FSDP materialises only each
// rank's rows, see FsdpOptions::materialize), like torchdistx's deferred_init or
// PyTorch's `with torch.device("meta")` followed by to_empty.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

namespace fsdpp::nn {

// While one is alive on this thread (they nest), deferred_init_active() is true.
class DeferredInit {
 public:
  DeferredInit();
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;
};

bool deferred_init_active();

// No-op unless a DeferredInit is active on this thread. Otherwise replaces the data of every
// parameter of `part` (recursively) by a meta tensor of the same shape and dtype. The tensor
// objects stay, and with them requires_grad, the module's members and weight ties (a tied
// head refers to the same, now meta, tensor). Buffers (e.g. rotary frequencies) stay real.
void release_to_meta(torch::nn::Module& part);

// param.set_data(data) that may also move `param` between the meta device and a real one.
// LibTorch 1.13's set_data refuses that ("incompatible tensor type": meta and CPU tensors
// have different dispatch keys); this does what set_data does without that check: the
// tensor object (identity, requires_grad, grad, version counter, hooks) stays, its storage,
// shape, dtype and device become data's, and a stale gradient accumulator is dropped.
void set_data_across_devices(const at::Tensor& param, const at::Tensor& data);

}  // namespace fsdpp::nn
