// Causal multi-head attention core shared by the model families.
#pragma once

#include <ATen/core/Tensor.h>

namespace fsdpp::models {

// softmax(q k^T * scale + causal mask) v for q, k, v of shape [batch, heads, seq, head_dim]
// (k and v already expanded to q's heads). scale defaults to 1/sqrt(head_dim).
// LibTorch >= 2.0: scaled_dot_product_attention (flash / efficient kernels on CUDA);
// 1.13: the same formula in exact math.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale = 0);

// [b, s, h*d] -> [b, h, s, d] and back.
at::Tensor split_heads(const at::Tensor& x, int64_t heads);
at::Tensor merge_heads(const at::Tensor& x);

}  // namespace fsdpp::models
