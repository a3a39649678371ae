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

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionOptions& options) {
  if (options.window <= 0 && options.softcap <= 0) return causal_attention(q, k, v, options.scale);
  const double scale = options.scale != 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const int64_t s_q = q.size(-2), s_k = k.size(-2);
  // Query i sits at position s_k - s_q + i, as in transformers' masks with a cache.
  auto query_at = at::arange(s_k - s_q, s_k, q.options().dtype(at::kLong)).unsqueeze(1);
  auto key_at = at::arange(s_k, q.options().dtype(at::kLong)).unsqueeze(0);
  auto visible = key_at <= query_at;
  if (options.window > 0) visible = visible & (key_at > query_at - options.window);
#if FSDPP_HAS_SDPA
  if (options.softcap <= 0) return at::scaled_dot_product_attention(q, k, v, visible, 0.0, false, scale);
#endif
  auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  if (options.softcap > 0) scores = at::tanh(scores / options.softcap) * options.softcap;
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1, at::kFloat).to(q.scalar_type()), v);
}

at::Tensor split_heads(const at::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

at::Tensor merge_heads(const at::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

}  // namespace fsdpp::models
