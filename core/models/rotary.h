// Rotary position embedding (RoPE) tables shared by a model's attention layers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <mutex>
#include <utility>

namespace fsdpp::models {

// cos and sin of the angles t * inv_freq[i], for positions t in [0, seq) and i in
// [0, rotary_dims/2), each duplicated along the last dimension: [seq, rotary_dims], HF's
// rotate_half layout. A model builds one table and every attention layer reads it, so the
// angles are computed once per sequence length, device and dtype, not once per layer and
// step (HF's LlamaModel computes position embeddings once per forward and hands them to
// its layers for the same reason).
//
// The angles are computed on the requested device in fp32 and the table is then cast to
// the requested dtype: the queries' (under autocast bf16, so the rotation runs in bf16 as
// in torch_peer.py's Llama, instead of promoting q and k to fp32). Thread-safe: a
// checkpointed layer's recomputation may run on autograd's device thread.
class RotaryTable {
 public:
  explicit RotaryTable(at::Tensor inv_freq);  // [head_dim / 2], fp32

  // {cos, sin}, [seq, head_dim] each, on `device` in `dtype`; neither requires grad.
  std::pair<at::Tensor, at::Tensor> cos_sin(int64_t seq, c10::Device device, c10::ScalarType dtype);

  const at::Tensor& inv_freq() const { return inv_freq_; }

 private:
  at::Tensor inv_freq_;
  std::mutex mutex_;
  // The last request's table (training asks for one shape over and over).
  int64_t seq_ = -1;
  c10::Device device_{c10::kCPU};
  c10::ScalarType dtype_ = c10::ScalarType::Undefined;
  bool inference_ = false;
  at::Tensor cos_, sin_;
};

// x * cos + rotate_half(x) * sin for x [batch, heads, seq, head_dim], rotate_half(x) =
// cat(-x[..., d/2:], x[..., :d/2]). A table narrower than head_dim (partial rotary) rotates
// the first cos.size(-1) dims and passes the rest through, as transformers' Phi-3 does.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace fsdpp::models
