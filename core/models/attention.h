// Causal multi-head attention core shared by the model families.
#pragma once

#include <ATen/core/Tensor.h>

namespace fsdpp::models {

// softmax(q k^T * scale + causal mask) v for q, k, v of shape [batch, heads, seq, head_dim]
// (k and v already expanded to q's heads). scale defaults to 1/sqrt(head_dim).
// LibTorch >= 2.0: scaled_dot_product_attention (flash / efficient kernels on CUDA);
// 1.13: the same formula in exact math.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale = 0);

// What a family changes in causal attention. window > 0: query t sees keys t - window + 1
// to t only (transformers' sliding_window_overlay, kv > q - window). softcap > 0: scores
// become softcap * tanh(scores / softcap) before the mask (Gemma 2's attn_logit_softcapping),
// computed as transformers' eager attention does (softmax in fp32, rounded to q's dtype).
struct AttentionOptions {
  double scale = 0;  // 0: 1/sqrt(head_dim)
  int64_t window = 0;
  double softcap = 0;
};
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionOptions& options);

// [b, s, h*d] -> [b, h, s, d] and back.
at::Tensor split_heads(const at::Tensor& x, int64_t heads);
at::Tensor merge_heads(const at::Tensor& x);

}  // namespace fsdpp::models
