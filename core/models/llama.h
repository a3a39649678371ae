// The Llama family (Llama 2/3, CodeLlama, Mistral-style) with Hugging Face
// LlamaForCausalLM semantics and tensor names: RMSNorm, rotary position embeddings
// (rope_theta, Llama-3 rope_scaling), SwiGLU MLP, grouped-query attention, optional tied
// embeddings; plus from-scratch presets by size. Mistral, Qwen2/2.5, Qwen3, Gemma 2 and
// Gemma 3 (text), Phi-3 and Phi-4 are options of the same blocks (as torchtune's builders
// pick options of shared components): which projections carry a bias, per-head q/k RMSNorm,
// sliding-window layers, Gemma's norms, scaled embeddings, GeGLU, attention scale and
// soft-capping, Phi-3's fused projections and partial rotary, Mixtral's sparse experts.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/models/attention.h"
#include "core/models/layers.h"
#include "core/models/moe.h"
#include "core/models/rotary.h"

namespace fsdpp::models {

struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct LlamaConfig {
  // Whose config.json this is, and whose to_json writes: llama, mistral, qwen2, qwen3,
  // gemma2, gemma3_text, phi3, phi (built as PhiForCausalLM, phi.h), mixtral or qwen3_moe.
  std::string model_type = "llama";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-5;  // Phi: its LayerNorms' layer_norm_eps
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // q_proj, k_proj, v_proj (Llama's attention_bias, Qwen2 always)
  bool o_proj_bias = false;  // o_proj (Llama's and Qwen3's attention_bias; never Qwen2)
  bool mlp_bias = false;     // gate_proj, up_proj, down_proj (Llama's mlp_bias)
  bool qk_norm = false;  // Qwen3, Gemma 3: RMSNorm over head_dim of every q and k head, before rope (Phi: qk_layernorm)
  // Which layers attend through a window of sliding_window tokens: empty, every layer when
  // sliding_window > 0 (Mistral); else one entry per layer (Qwen2/3 and Gemma's layer_types).
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // Gemma: RMSNorm as x * (1 + w) in fp32, a norm after attention and around the MLP (four per
  // layer), embeddings times sqrt(hidden_size) rounded to their dtype, pad_token_id's row of
  // the embedding gets no gradient (nn.Embedding's padding_idx).
  bool gemma_norms = false;
  std::string hidden_act = "silu";     // silu, or gelu_pytorch_tanh (Gemma's GeGLU)
  double query_pre_attn_scalar = 0;    // attention scale scalar^-0.5; 0: head_dim^-0.5
  double attn_logit_softcapping = 0;   // 0: none
  double final_logit_softcapping = 0;  // 0: none
  double local_rope_theta = 0;         // sliding layers' rope base (Gemma 3); 0: rope_theta
  double rope_linear_factor = 1.0;     // rope_type linear: positions divided by it
  int64_t pad_token_id = -1;           // the embedding's padding_idx; -1: none
  // Phi-3: one qkv_proj [q | k | v] and one gate_up_proj [gate | up], as its checkpoints
  // store them (one matmul each); rope on the first head_dim * partial_rotary_factor dims.
  bool fused_projections = false;
  double partial_rotary_factor = 1.0;
  // Mixtral, Qwen3-MoE: a sparse layer's MLP is num_experts SwiGLU experts of
  // moe_intermediate_size (0: intermediate_size), experts_per_token of them per token
  // (moe.h); 0: every MLP dense. Qwen3-MoE: layers in mlp_only_layers, and those whose
  // (index + 1) is not a multiple of decoder_sparse_step, keep a dense MLP of intermediate_size.
  int64_t num_experts = 0;
  int64_t experts_per_token = 2;
  int64_t moe_intermediate_size = 0;
  bool normalize_top_k = true;  // Qwen3-MoE's norm_topk_prob; Mixtral always
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // output_router_logits: training adds router_aux_loss_coef times the load-balancing loss
  // of each forward pass to its mean cross-entropy (LlamaForCausalLMImpl::auxiliary_loss).
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.001;

  // Reads the config.json of any model_type above (none: llama). Every key is computed,
  // listed as not changing the math, or refused in one line naming `source`, the key and
  // its value (llama.cpp's key tables); a key another family uses is accepted only at the
  // value this family computes.
  static LlamaConfig from_json(const nlohmann::json& json, const std::string& source);
  nlohmann::json to_json() const;
  int64_t dim_per_head() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  // The rotated dims of a head: transformers' int(head_dim * partial_rotary_factor).
  int64_t rotary_dims() const {
    return static_cast<int64_t>(static_cast<double>(dim_per_head()) * partial_rotary_factor);
  }
  // The window layer `layer` attends through; 0: full causal attention.
  int64_t window_of_layer(int64_t layer) const;
  // Whether layer `layer`'s MLP is a mixture of experts.
  bool is_sparse_layer(int64_t layer) const;
  // Whether training adds the load-balancing loss: output_router_logits on a mixture of experts.
  bool has_auxiliary_loss() const { return output_router_logits && num_experts > 0; }
  int64_t expert_intermediate_size() const {
    return moe_intermediate_size > 0 ? moe_intermediate_size : intermediate_size;
  }
  // Exact parameter count (tied embeddings counted once), without building the model.
  int64_t parameter_count() const;
};

// The model_types LlamaConfig reads: llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3,
// phi, mixtral, qwen3_moe.
const std::vector<std::string>& llama_model_types();

// Presets for training from scratch: "tiny" (tests), "125M", "350M" (Llama-style sizes
// of GPT-3's small models), "1B" and "3B" (Llama 3.2), "7B", "13B", "70B" (Llama 2), "8B" (Llama 3).
LlamaConfig llama_preset(const std::string& name);
const std::vector<std::string>& llama_preset_names();

// Inverse frequencies of the rotary embedding, [rotary_dims / 2], with Llama-3 or linear
// scaling, from base `theta` (0: c.rope_theta).
torch::Tensor rope_inverse_frequencies(const LlamaConfig& c, double theta = 0);

// Reads its rotary angles from `rotary`, the table its model shares among the layers of
// its kind (Gemma 3: sliding layers have their own base).
struct LlamaAttentionImpl : torch::nn::Module {
  LlamaAttentionImpl(const LlamaConfig& c, int64_t layer, std::shared_ptr<RotaryTable> rotary);
  torch::Tensor forward(const torch::Tensor& x);
  int64_t heads, kv_heads, head_dim;
  AttentionOptions attention;
  std::shared_ptr<RotaryTable> rotary;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  torch::nn::Linear qkv_proj{nullptr};       // Phi-3: instead of q_proj, k_proj, v_proj
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  // only with qk_norm (Qwen3)
};
TORCH_MODULE(LlamaAttention);

struct LlamaMlpImpl : torch::nn::Module {
  explicit LlamaMlpImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // down(act(gate(x)) * up(x)), act silu or gelu-tanh
  bool gelu_tanh, summed;                         // summed: the caller only adds the output to the residual stream
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  torch::nn::Linear gate_up_proj{nullptr};  // Phi-3: instead of gate_proj, up_proj
};
TORCH_MODULE(LlamaMlp);

struct LlamaDecoderLayerImpl : torch::nn::Module {
  // `router_logits`: where a sparse layer records its router logits (null: nowhere).
  LlamaDecoderLayerImpl(const LlamaConfig& c, int64_t layer, std::shared_ptr<RotaryTable> rotary,
                        const std::shared_ptr<RouterLogits>& router_logits = nullptr);
  torch::Tensor forward(torch::Tensor x);
  // Llama: post_attention_layernorm is the MLP's input norm. Gemma: it normalises the
  // attention's output, and pre_/post_feedforward_layernorm surround the MLP.
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RmsNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};
  // A sparse layer's experts instead of mlp, named block_sparse_moe (Mixtral) or mlp (Qwen3-MoE).
  SparseMoe moe{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

struct LlamaModelImpl : torch::nn::Module {
  LlamaModelImpl(const LlamaConfig& c, const std::shared_ptr<RouterLogits>& router_logits = nullptr);
  torch::Tensor forward(const torch::Tensor& tokens);  // -> normed hidden states
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  std::vector<LlamaDecoderLayer> layer_list;
  RmsNorm norm{nullptr};
  double embed_scale;                         // Gemma: sqrt(hidden_size); else 1
  std::shared_ptr<RotaryTable> rotary;        // every (full-attention) layer's angles, not a parameter
  std::shared_ptr<RotaryTable> local_rotary;  // Gemma 3's sliding layers', or null
};
TORCH_MODULE(LlamaModel);

struct LlamaForCausalLMImpl : torch::nn::Module {
  explicit LlamaForCausalLMImpl(const LlamaConfig& c);
  torch::Tensor forward(const torch::Tensor& tokens);  // -> logits [b, s, vocab], soft-capped if asked
  // router_aux_loss_coef times the load-balancing loss of the last forward pass run with
  // gradients on (transformers' MixtralForCausalLM adds it to the loss when labels are given).
  // Only with output_router_logits; std::logic_error if no such forward pass ran.
  torch::Tensor auxiliary_loss() const;
  LlamaConfig config;
  std::shared_ptr<RouterLogits> router_logits;  // output_router_logits only: this pass's, per sparse layer
  LlamaModel model{nullptr};
  LmHead lm_head{nullptr};
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace fsdpp::models
