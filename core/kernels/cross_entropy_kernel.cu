// The fused cross-entropy kernels (contract in cross_entropy_kernel.h). One block per row.
// Forward reads the row once and keeps an online (max, sum of exp) pair per thread: adding
// values under a larger max rescales the sum by exp(old_max - new_max) (Milakov and
// Gimelshein's online softmax normaliser, as llm.c's fused classifier does it). Backward
// reads the row once more and writes the gradient once, in the logits' dtype.
//
// Against the composite (logits.float(), log_softmax, nll_loss and their backwards, which
// make an fp32 copy of the logits, an fp32 log-probability tensor and an fp32 gradient):
// for Llama 3's 128,256-entry vocabulary at 4 x 2048 tokens that is 6.3 GB of memory
// traffic a step instead of about 38.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "core/kernels/cross_entropy_kernel.h"

namespace fsdpp::kernels {

namespace {

constexpr int kThreads = 256;  // a multiple of the warp size, at most 32 warps
constexpr int kWarp = 32;

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }

// Round-to-nearest-even narrowing, as torch's .to(dtype) rounds.
template <typename T>
__device__ __forceinline__ T narrow_to(float v);
template <>
__device__ __forceinline__ float narrow_to<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow_to<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half narrow_to<__half>(float v) {
  return __float2half_rn(v);
}

// VEC consecutive values, loaded or stored as one 16-byte access (VEC = 1: one value).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// Online softmax statistics: the largest value seen and sum(exp(value - max)).
struct Stats {
  float max;
  float sum;
};

// Merges two partial statistics. A shift of 0 where both maxima are -inf keeps exp() away
// from -inf - -inf (NaN); NaN inputs still reach the sum (fmaxf skips them, exp does not).
__device__ __forceinline__ Stats merge(Stats a, Stats b) {
  const float m = fmaxf(a.max, b.max);
  const float shift = m == -INFINITY ? 0.f : m;
  return {m, a.sum * expf(a.max - shift) + b.sum * expf(b.max - shift)};
}

// Every thread's statistics merged; the result is valid in thread 0.
__device__ Stats block_merge(Stats s) {
  __shared__ Stats warp_stats[kThreads / kWarp];
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    Stats other{__shfl_xor_sync(0xffffffffu, s.max, offset), __shfl_xor_sync(0xffffffffu, s.sum, offset)};
    s = merge(s, other);
  }
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (lane == 0) warp_stats[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < static_cast<int>(blockDim.x) / kWarp ? warp_stats[lane] : Stats{-INFINITY, 0.f};
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      Stats other{__shfl_xor_sync(0xffffffffu, s.max, offset), __shfl_xor_sync(0xffffffffu, s.sum, offset)};
      s = merge(s, other);
    }
  }
  return s;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const T* __restrict__ logits, int64_t vocab, int64_t row_stride, const int64_t* __restrict__ targets,
                   int64_t ignore_index, float* __restrict__ loss, float* __restrict__ lse) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  const auto* packs = reinterpret_cast<const Pack<T, VEC>*>(x);
  const int64_t pack_count = vocab / VEC;
  Stats s{-INFINITY, 0.f};
  for (int64_t i = threadIdx.x; i < pack_count; i += blockDim.x) {
    const Pack<T, VEC> p = packs[i];
    float f[VEC];
    float local_max = -INFINITY;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      f[k] = widen(p.v[k]);
      local_max = fmaxf(local_max, f[k]);
    }
    const float m = fmaxf(s.max, local_max);
    const float shift = m == -INFINITY ? 0.f : m;
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) sum += expf(f[k] - shift);
    s = {m, s.sum * expf(s.max - shift) + sum};
  }
  for (int64_t j = pack_count * VEC + threadIdx.x; j < vocab; j += blockDim.x) s = merge(s, Stats{widen(x[j]), 1.f});
  s = block_merge(s);
  if (threadIdx.x == 0) {
    const float row_lse = s.max + logf(s.sum);
    lse[row] = row_lse;
    const int64_t target = targets[row];
    if (target == ignore_index)
      loss[row] = 0.f;
    else if (target < 0 || target >= vocab)
      loss[row] = NAN;  // no class: the loss says so rather than read outside the row
    else
      loss[row] = row_lse - widen(x[target]);
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const T* __restrict__ logits, int64_t vocab, int64_t row_stride,
                    const int64_t* __restrict__ targets, int64_t ignore_index, const float* __restrict__ lse,
                    const float* __restrict__ grad_scale, T* __restrict__ grad) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  T* out = grad + row * vocab;
  const int64_t target = targets[row];
  const bool ignored = target == ignore_index;
  const bool no_class = !ignored && (target < 0 || target >= vocab);
  const float g = grad_scale[0];
  const float row_lse = no_class ? NAN : lse[row];
  // d(g * (lse - x_t)) / dx_j = g * (softmax_j - [j == t]); an ignored row adds nothing.
  auto value = [&](float xj, int64_t j) {
    return ignored ? 0.f : g * (expf(xj - row_lse) - (j == target ? 1.f : 0.f));
  };
  const auto* in_packs = reinterpret_cast<const Pack<T, VEC>*>(x);
  auto* out_packs = reinterpret_cast<Pack<T, VEC>*>(out);
  const int64_t pack_count = vocab / VEC;
  for (int64_t i = threadIdx.x; i < pack_count; i += blockDim.x) {
    const Pack<T, VEC> p = in_packs[i];
    Pack<T, VEC> q;
#pragma unroll
    for (int k = 0; k < VEC; ++k) q.v[k] = narrow_to<T>(value(widen(p.v[k]), i * VEC + k));
    out_packs[i] = q;
  }
  for (int64_t j = pack_count * VEC + threadIdx.x; j < vocab; j += blockDim.x)
    out[j] = narrow_to<T>(value(widen(x[j]), j));
}

// 16-byte accesses need every row of the logits (and of the gradient, whose rows are
// `vocab` apart) to start on a 16-byte boundary; otherwise one value at a time.
template <typename T>
bool rows_are_16_byte_aligned(const void* base, int64_t row_stride, int64_t vocab, const void* other = nullptr) {
  constexpr int64_t vec = 16 / sizeof(T);
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(base) && row_stride % vec == 0 && vocab % vec == 0 && (other == nullptr || aligned(other));
}

std::string launch_error(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : std::string(what) + ": " + cudaGetErrorString(e);
}

template <typename T>
void launch_forward(const void* logits, int64_t rows, int64_t vocab, int64_t row_stride, const int64_t* targets,
                    int64_t ignore_index, float* loss, float* lse, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(logits);
  if (rows_are_16_byte_aligned<T>(logits, row_stride, vocab))
    forward_kernel<T, 16 / sizeof(T)>
        <<<rows, kThreads, 0, stream>>>(x, vocab, row_stride, targets, ignore_index, loss, lse);
  else
    forward_kernel<T, 1><<<rows, kThreads, 0, stream>>>(x, vocab, row_stride, targets, ignore_index, loss, lse);
}

template <typename T>
void launch_backward(const void* logits, int64_t rows, int64_t vocab, int64_t row_stride, const int64_t* targets,
                     int64_t ignore_index, const float* lse, const float* grad_scale, void* grad, cudaStream_t stream) {
  const auto* x = static_cast<const T*>(logits);
  auto* g = static_cast<T*>(grad);
  if (rows_are_16_byte_aligned<T>(logits, row_stride, vocab, grad))
    backward_kernel<T, 16 / sizeof(T)>
        <<<rows, kThreads, 0, stream>>>(x, vocab, row_stride, targets, ignore_index, lse, grad_scale, g);
  else
    backward_kernel<T, 1>
        <<<rows, kThreads, 0, stream>>>(x, vocab, row_stride, targets, ignore_index, lse, grad_scale, g);
}

}  // namespace

std::string cross_entropy_forward(const void* logits, LogitDtype dtype, int64_t rows, int64_t vocab, int64_t row_stride,
                                  const int64_t* targets, int64_t ignore_index, float* loss, float* lse, void* stream) {
  if (rows == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case LogitDtype::Float32:
      launch_forward<float>(logits, rows, vocab, row_stride, targets, ignore_index, loss, lse, s);
      break;
    case LogitDtype::BFloat16:
      launch_forward<__nv_bfloat16>(logits, rows, vocab, row_stride, targets, ignore_index, loss, lse, s);
      break;
    case LogitDtype::Float16:
      launch_forward<__half>(logits, rows, vocab, row_stride, targets, ignore_index, loss, lse, s);
      break;
  }
  return launch_error("cross_entropy_forward");
}

std::string cross_entropy_backward(const void* logits, LogitDtype dtype, int64_t rows, int64_t vocab,
                                   int64_t row_stride, const int64_t* targets, int64_t ignore_index, const float* lse,
                                   const float* grad_scale, void* grad_logits, void* stream) {
  if (rows == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case LogitDtype::Float32:
      launch_backward<float>(logits, rows, vocab, row_stride, targets, ignore_index, lse, grad_scale, grad_logits, s);
      break;
    case LogitDtype::BFloat16:
      launch_backward<__nv_bfloat16>(logits, rows, vocab, row_stride, targets, ignore_index, lse, grad_scale,
                                     grad_logits, s);
      break;
    case LogitDtype::Float16:
      launch_backward<__half>(logits, rows, vocab, row_stride, targets, ignore_index, lse, grad_scale, grad_logits, s);
      break;
  }
  return launch_error("cross_entropy_backward");
}

}  // namespace fsdpp::kernels
