#include "core/models/attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "core/compat/torch_compat.h"

namespace fsdpp::models {

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
#if FSDPP_HAS_SDPA
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, scale);
#else
  auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  auto future = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  return at::matmul(at::softmax(scores, -1, at::kFloat).to(q.scalar_type()), v);
#endif
}

at::Tensor split_heads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

at::Tensor merge_heads(const at::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

}  // namespace fsdpp::models
