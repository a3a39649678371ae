// The fused token cross-entropy's CUDA kernels, on raw device pointers (no torch header, so
// that nvcc compiles them in seconds; core/kernels/cross_entropy.h is the tensor-level call).
//
// Layout: `logits` holds `rows` rows of `vocab` values each, row r starting at element
// r * row_stride, of `dtype`; `targets` holds `rows` int64 class indices. Every value is
// widened to fp32 before any arithmetic, as torch's cross_entropy(logits.float(), ...) does,
// so the loss and the gradient follow fp32 rules while the logits stay in their own dtype.
//
// Both calls are asynchronous on `stream` (a cudaStream_t) and return the launch's error
// text, empty on success. A target outside [0, vocab) other than `ignore_index` names no
// class: its row's loss is NaN (and so is its gradient), nothing outside the row is read.
#pragma once

#include <cstdint>
#include <string>

namespace fsdpp::kernels {

enum class LogitDtype { Float32, BFloat16, Float16 };

// Per row: lse[r] = log(sum_j exp(x_rj)) in fp32 (max-shifted, one read of the row), and
// loss[r] = lse[r] - x_r,target[r], or 0 where target[r] == ignore_index.
// `loss` and `lse` are `rows` fp32 values on the device.
std::string cross_entropy_forward(const void* logits, LogitDtype dtype, int64_t rows, int64_t vocab, int64_t row_stride,
                                  const int64_t* targets, int64_t ignore_index, float* loss, float* lse, void* stream);

// The gradient of (grad_scale[0] * sum_r loss[r]) with respect to the logits, written to
// `grad_logits` (dense [rows, vocab], the logits' dtype): g * (exp(x_rj - lse[r]) -
// [j == target[r]]), computed in fp32 and rounded once; rows with ignore_index get 0.
// `grad_scale` is one fp32 value on the device (autograd's incoming gradient).
std::string cross_entropy_backward(const void* logits, LogitDtype dtype, int64_t rows, int64_t vocab,
                                   int64_t row_stride, const int64_t* targets, int64_t ignore_index, const float* lse,
                                   const float* grad_scale, void* grad_logits, void* stream);

}  // namespace fsdpp::kernels
