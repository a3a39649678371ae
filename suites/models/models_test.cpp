// Each model family against an independent, deliberately plain implementation of the
// published formulas, written here from the weights by name (no fsdpp model code) and run in
// float64 as the ground truth (harness/oracle/tolerance.h's float64 judge), and the Hugging
// Face names and shapes the loaders rely on.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <map>
#include <tuple>
#include <unordered_set>

#include "core/models/falcon.h"
#include "core/models/families.h"
#include "core/models/gpt2.h"
#include "core/models/llama.h"
#include "core/models/opt.h"
#include "core/models/presets.h"
#include "harness/oracle/tolerance.h"

namespace fsdpp::models {
namespace {

using Weights = std::map<std::string, torch::Tensor>;
using torch::Tensor;

// The model's weights in float64: the formulas below run on exactly the model's values, in
// float64 as the ground truth its output is judged against (expect_formulas).
Weights weights_of(torch::nn::Module& m) {
  Weights w;
  torch::NoGradGuard no_grad;
  for (auto& item : m.named_parameters(true)) w[item.key()] = item.value().detach().to(torch::kDouble);
  return w;
}

// Random, non-trivial values everywhere (LayerNorm/RMSNorm weights and biases included).
void randomize(torch::nn::Module& m, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.copy_(torch::randn(p.sizes()) * 0.3 + (p.dim() == 1 ? 0.5 : 0.0));
}

Tensor tokens_for(int64_t vocab, int64_t seq) {
  torch::manual_seed(99);
  return torch::randint(0, vocab, {2, seq});
}

// ---- plain building blocks, one formula each ----
Tensor layer_norm_ref(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  auto mean = x.mean(-1, true);
  auto var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / torch::sqrt(var + eps) * w + b;
}
Tensor rms_norm_ref(const Tensor& x, const Tensor& w, double eps) {
  return x / torch::sqrt(x.pow(2).mean(-1, true) + eps) * w;
}
Tensor softmax_ref(const Tensor& x) {
  auto e = torch::exp(x - std::get<0>(x.max(-1, true)));
  return e / e.sum(-1, true);
}
Tensor causal_mask_ref(int64_t s) {  // 0 where allowed, -inf above the diagonal
  auto m = torch::zeros({s, s});
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = i + 1; j < s; ++j) m[i][j] = -INFINITY;
  return m;
}
// One head at a time: q_h k_h^T * scale (soft-capped: cap * tanh(scores / cap)) + mask ->
// softmax -> v_h. window > 0: query i also may not see keys j <= i - window.
Tensor attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads, int64_t kv_heads, int64_t hd,
                     double scale, int64_t window = 0, double softcap = 0) {
  std::vector<Tensor> outs;
  auto mask = causal_mask_ref(q.size(1));
  for (int64_t i = 0; i < q.size(1) && window > 0; ++i)
    for (int64_t j = 0; j <= i - window; ++j) mask[i][j] = -INFINITY;
  for (int64_t h = 0; h < heads; ++h) {
    int64_t g = h / (heads / kv_heads);  // the KV head this query head reads
    auto qh = q.narrow(-1, h * hd, hd), kh = k.narrow(-1, g * hd, hd), vh = v.narrow(-1, g * hd, hd);
    auto scores = torch::matmul(qh, kh.transpose(1, 2)) * scale;
    if (softcap > 0) scores = softcap * torch::tanh(scores / softcap);
    outs.push_back(torch::matmul(softmax_ref(scores + mask), vh));
  }
  return torch::cat(outs, -1);
}
Tensor gelu_new_ref(const Tensor& x) {
  return 0.5 * x * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
}
Tensor linear_ref(const Weights& w, const std::string& name, const Tensor& x) {  // x W^T (+ b)
  auto y = torch::matmul(x, w.at(name + ".weight").t());
  return w.count(name + ".bias") ? y + w.at(name + ".bias") : y;
}

// The same weights in `dtype`.
Weights in_dtype(const Weights& w, torch::ScalarType dtype) {
  Weights out;
  for (const auto& [name, t] : w) out[name] = t.to(dtype);
  return out;
}

// The model's output against the formulas by harness/oracle/tolerance.h's float64 judge:
// `formulas(w)` on the model's weights in float64 is the ground truth, the same formulas on
// them in the model's dtype the peer (the rounding error that dtype itself makes here).
template <class Formulas>
void expect_formulas(const Tensor& actual, const Weights& w, const Formulas& formulas) {
  auto judged = harness::judge_against_float64(actual, formulas(w), formulas(in_dtype(w, actual.scalar_type())));
  EXPECT_TRUE(judged.ok) << judged.describe();
}

// ---------------------------------------------------------------- GPT-2
Tensor gpt2_ref(const Weights& w, const Gpt2Config& c, const Tensor& tokens) {
  const int64_t s = tokens.size(1), d = c.n_embd, hd = d / c.n_head;
  auto x = w.at("transformer.wte.weight").index({tokens}) + w.at("transformer.wpe.weight").narrow(0, 0, s);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    std::string p = "transformer.h." + std::to_string(i) + ".";
    auto a = layer_norm_ref(x, w.at(p + "ln_1.weight"), w.at(p + "ln_1.bias"), c.layer_norm_epsilon);
    auto qkv = torch::matmul(a, w.at(p + "attn.c_attn.weight")) + w.at(p + "attn.c_attn.bias");  // Conv1D [in, out]
    auto q = qkv.narrow(-1, 0, d), k = qkv.narrow(-1, d, d), v = qkv.narrow(-1, 2 * d, d);
    auto y = attention_ref(q, k, v, c.n_head, c.n_head, hd, 1.0 / std::sqrt(double(hd)));
    x = x + torch::matmul(y, w.at(p + "attn.c_proj.weight")) + w.at(p + "attn.c_proj.bias");
    auto m = layer_norm_ref(x, w.at(p + "ln_2.weight"), w.at(p + "ln_2.bias"), c.layer_norm_epsilon);
    auto h = gelu_new_ref(torch::matmul(m, w.at(p + "mlp.c_fc.weight")) + w.at(p + "mlp.c_fc.bias"));
    x = x + torch::matmul(h, w.at(p + "mlp.c_proj.weight")) + w.at(p + "mlp.c_proj.bias");
  }
  x = layer_norm_ref(x, w.at("transformer.ln_f.weight"), w.at("transformer.ln_f.bias"), c.layer_norm_epsilon);
  return torch::matmul(x, w.at("transformer.wte.weight").t());
}

TEST(Gpt2, LogitsMatchThePublishedFormulas) {
  Gpt2Config c;
  c.vocab_size = 53;
  c.n_positions = 16;
  c.n_embd = 24;
  c.n_layer = 2;
  c.n_head = 3;
  c.layer_norm_epsilon = 1e-5;
  Gpt2LMHeadModel model(c);
  randomize(*model, 1);
  auto tokens = tokens_for(c.vocab_size, 11);
  torch::NoGradGuard no_grad;
  expect_formulas(model->forward(tokens), weights_of(*model), [&](const Weights& v) { return gpt2_ref(v, c, tokens); });
}

TEST(Gpt2, TensorsCarryHuggingFaceNamesAndLayouts) {
  Gpt2Config c;
  c.vocab_size = 53, c.n_positions = 16, c.n_embd = 24, c.n_layer = 2, c.n_head = 3;
  Gpt2LMHeadModel model(c);
  auto w = weights_of(*model);
  EXPECT_EQ(w.at("transformer.h.1.attn.c_attn.weight").sizes(), (std::vector<int64_t>{24, 72}));  // [in, out]
  EXPECT_EQ(w.at("transformer.h.0.mlp.c_proj.weight").sizes(), (std::vector<int64_t>{96, 24}));
  EXPECT_TRUE(w.count("transformer.wpe.weight") && w.count("transformer.ln_f.bias") && w.count("lm_head.weight"));
  EXPECT_TRUE(model->lm_head->weight.is_same(model->transformer->wte->weight)) << "head tied to wte";
  EXPECT_EQ(w.size(), 2u + 2 * 12 + 2 + 1);  // wte, wpe, 12 per block, ln_f, lm_head (tied)
}

// ---------------------------------------------------------------- OPT
Tensor opt_ref(const Weights& w, const OptConfig& c, const Tensor& tokens) {
  const int64_t s = tokens.size(1), d = c.hidden_size, hd = d / c.num_attention_heads;
  std::string dec = "model.decoder.";
  auto x = w.at(dec + "embed_tokens.weight").index({tokens});
  if (c.word_embed_proj_dim != d) x = torch::matmul(x, w.at(dec + "project_in.weight").t());
  x = x + w.at(dec + "embed_positions.weight").narrow(0, 2, s);  // offset 2
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    std::string p = dec + "layers." + std::to_string(i) + ".";
    auto ln = [&](const Tensor& t, const std::string& n) {
      return layer_norm_ref(t, w.at(p + n + ".weight"), w.at(p + n + ".bias"), 1e-5);
    };
    auto a = c.do_layer_norm_before ? ln(x, "self_attn_layer_norm") : x;
    auto q = linear_ref(w, p + "self_attn.q_proj", a) / std::sqrt(double(hd));
    auto y = attention_ref(q, linear_ref(w, p + "self_attn.k_proj", a), linear_ref(w, p + "self_attn.v_proj", a),
                           c.num_attention_heads, c.num_attention_heads, hd, 1.0);
    x = x + linear_ref(w, p + "self_attn.out_proj", y);
    if (!c.do_layer_norm_before) x = ln(x, "self_attn_layer_norm");
    auto m = c.do_layer_norm_before ? ln(x, "final_layer_norm") : x;
    x = x + linear_ref(w, p + "fc2", torch::clamp_min(linear_ref(w, p + "fc1", m), 0));
    if (!c.do_layer_norm_before) x = ln(x, "final_layer_norm");
  }
  if (c.do_layer_norm_before)
    x = layer_norm_ref(x, w.at(dec + "final_layer_norm.weight"), w.at(dec + "final_layer_norm.bias"), 1e-5);
  if (c.word_embed_proj_dim != d) x = torch::matmul(x, w.at(dec + "project_out.weight").t());
  return torch::matmul(x, w.at(dec + "embed_tokens.weight").t());
}

OptConfig tiny_opt(bool pre_norm, int64_t proj_dim) {
  OptConfig c;
  c.vocab_size = 61;
  c.hidden_size = 20;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.ffn_dim = 36;
  c.max_position_embeddings = 32;
  c.word_embed_proj_dim = proj_dim;
  c.do_layer_norm_before = pre_norm;
  return c;
}

TEST(Opt, PreLayerNormLogitsMatchThePublishedFormulas) {
  auto c = tiny_opt(true, 20);
  OptForCausalLM model(c);
  randomize(*model, 2);
  auto tokens = tokens_for(c.vocab_size, 9);
  torch::NoGradGuard no_grad;
  expect_formulas(model->forward(tokens), weights_of(*model), [&](const Weights& v) { return opt_ref(v, c, tokens); });
  EXPECT_TRUE(weights_of(*model).count("model.decoder.final_layer_norm.weight"));
}

TEST(Opt, PostLayerNormWithEmbeddingProjectionsLikeOpt350M) {
  auto c = tiny_opt(false, 12);
  OptForCausalLM model(c);
  randomize(*model, 3);
  auto tokens = tokens_for(c.vocab_size, 9);
  torch::NoGradGuard no_grad;
  expect_formulas(model->forward(tokens), weights_of(*model), [&](const Weights& v) { return opt_ref(v, c, tokens); });
  auto w = weights_of(*model);
  EXPECT_EQ(w.at("model.decoder.project_in.weight").sizes(), (std::vector<int64_t>{20, 12}));
  EXPECT_EQ(w.at("model.decoder.embed_positions.weight").size(0), 34);  // max positions + 2
  EXPECT_FALSE(w.count("model.decoder.final_layer_norm.weight"));
}

// ---------------------------------------------------------------- Llama
Tensor rope_ref(const Tensor& x, const Tensor& inv_freq, int64_t heads, int64_t hd) {
  // Pairs (i, i + half) rotate by angle pos * inv_freq[i] (HF's rotate_half layout), half =
  // inv_freq's length: hd / 2, or fewer with a partial rotary, whose other dims stay.
  auto out = x.clone();
  const int64_t s = x.size(1), half = inv_freq.size(0);
  for (int64_t pos = 0; pos < s; ++pos)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        double angle = static_cast<double>(pos) * inv_freq[i].item<double>();
        auto a = x.select(1, pos).select(-1, h * hd + i), b = x.select(1, pos).select(-1, h * hd + i + half);
        out.select(1, pos).select(-1, h * hd + i).copy_(a * std::cos(angle) - b * std::sin(angle));
        out.select(1, pos).select(-1, h * hd + i + half).copy_(b * std::cos(angle) + a * std::sin(angle));
      }
  return out;
}

Tensor inv_freq_ref(const LlamaConfig& c) {
  const int64_t hd = c.rotary_dims();
  auto inv = torch::empty({hd / 2}, torch::kDouble);
  for (int64_t i = 0; i < hd / 2; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, 2.0 * static_cast<double>(i) / static_cast<double>(hd));
    if (c.rope_scaling) {  // Llama 3.1's published frequency rescaling
      const auto& r = *c.rope_scaling;
      double wavelen = 2 * M_PI / f;
      if (wavelen > static_cast<double>(r.original_max_position_embeddings) / r.low_freq_factor) {
        f = f / r.factor;
      } else if (wavelen >= static_cast<double>(r.original_max_position_embeddings) / r.high_freq_factor) {
        double smooth = (static_cast<double>(r.original_max_position_embeddings) / wavelen - r.low_freq_factor) /
                        (r.high_freq_factor - r.low_freq_factor);
        f = (1 - smooth) * f / r.factor + smooth * f;
      }
    }
    inv[i] = f;
  }
  return inv;
}

Tensor llama_ref(const Weights& w, const LlamaConfig& c, const Tensor& tokens) {
  const int64_t hd = c.dim_per_head(), heads = c.num_attention_heads, kv = c.num_key_value_heads;
  auto x = w.at("model.embed_tokens.weight").index({tokens});
  auto inv = inv_freq_ref(c);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    auto a = rms_norm_ref(x, w.at(p + "input_layernorm.weight"), c.rms_norm_eps);
    auto head_norm = [&](const Tensor& t, const std::string& name, int64_t n) {  // Qwen3: per head, before rope
      if (!w.count(p + name)) return t;
      return rms_norm_ref(t.view({t.size(0), t.size(1), n, hd}), w.at(p + name), c.rms_norm_eps).view(t.sizes());
    };
    auto q =
        rope_ref(head_norm(linear_ref(w, p + "self_attn.q_proj", a), "self_attn.q_norm.weight", heads), inv, heads, hd);
    auto k = rope_ref(head_norm(linear_ref(w, p + "self_attn.k_proj", a), "self_attn.k_norm.weight", kv), inv, kv, hd);
    auto y = attention_ref(q, k, linear_ref(w, p + "self_attn.v_proj", a), heads, kv, hd, 1.0 / std::sqrt(double(hd)));
    x = x + linear_ref(w, p + "self_attn.o_proj", y);
    auto m = rms_norm_ref(x, w.at(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    auto gate = linear_ref(w, p + "mlp.gate_proj", m);
    x = x + linear_ref(w, p + "mlp.down_proj", gate * torch::sigmoid(gate) * linear_ref(w, p + "mlp.up_proj", m));
  }
  x = rms_norm_ref(x, w.at("model.norm.weight"), c.rms_norm_eps);
  return torch::matmul(x, w.at("lm_head.weight").t());
}

TEST(Llama, GroupedQueryAttentionLogitsMatchThePublishedFormulas) {
  auto c = llama_preset("tiny");  // 4 query heads over 2 KV heads, untied head
  LlamaForCausalLM model(c);
  randomize(*model, 4);
  auto tokens = tokens_for(c.vocab_size, 10);
  torch::NoGradGuard no_grad;
  expect_formulas(model->forward(tokens), weights_of(*model),
                  [&](const Weights& v) { return llama_ref(v, c, tokens); });
}

TEST(Llama, Llama3RopeScalingAndTiedEmbeddingsMatchThePublishedFormulas) {
  auto c = llama_preset("tiny");
  c.tie_word_embeddings = true;
  c.rope_theta = 500000;
  c.max_position_embeddings = 64;
  c.rope_scaling = Llama3RopeScaling{8.0, 1.0, 4.0, 16};  // small original context: blended and divided bands
  LlamaForCausalLM model(c);
  randomize(*model, 5);
  auto tokens = tokens_for(c.vocab_size, 12);
  torch::NoGradGuard no_grad;
  expect_formulas(model->forward(tokens), weights_of(*model),
                  [&](const Weights& v) { return llama_ref(v, c, tokens); });
  EXPECT_TRUE(model->lm_head->weight.is_same(model->model->embed_tokens->weight));
  auto inv = rope_inverse_frequencies(c).to(torch::kDouble);
  auto ref = inv_freq_ref(c);
  EXPECT_TRUE(torch::allclose(inv, ref, 1e-6, 1e-12));
}

int64_t counted_parameters(torch::nn::Module& model) {
  std::unordered_set<const c10::TensorImpl*> seen;
  int64_t counted = 0;
  for (auto& p : model.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) counted += p.numel();
  return counted;
}

// Qwen3Attention: q_norm/k_norm (RMSNorm over head_dim, one weight for every head) between
// the projection and rope; head_dim its own (here 6, hidden/heads is 4); attention_bias on
// all four projections.
TEST(Llama, Qwen3QkNormAndItsOwnHeadDimMatchThePublishedFormulas) {
  auto c = llama_preset("tiny");
  c.model_type = "qwen3";
  c.head_dim = 6;
  c.qk_norm = c.qkv_bias = c.o_proj_bias = true;
  LlamaForCausalLM model(c);
  randomize(*model, 6);
  auto tokens = tokens_for(c.vocab_size, 10);
  auto w = weights_of(*model);
  EXPECT_EQ(w.at("model.layers.1.self_attn.q_norm.weight").sizes(), (std::vector<int64_t>{6}));
  EXPECT_TRUE(w.count("model.layers.1.self_attn.o_proj.bias"));
  EXPECT_EQ(c.parameter_count(), counted_parameters(*model));
  torch::NoGradGuard no_grad;
  expect_formulas(model->forward(tokens), w, [&](const Weights& v) { return llama_ref(v, c, tokens); });
}

// Llama's mlp_bias (gate/up/down biased) and Qwen2's q/k/v-but-not-o biases, as their
// config.json files say; the biases are computed (the formulas add every stored bias).
TEST(Llama, MlpBiasAndQwen2BiasesAreTheProjectionsTheirConfigsName) {
  auto llama = llama_preset("tiny").to_json();
  llama["mlp_bias"] = true;
  auto qwen2 = llama_preset("tiny");
  qwen2.model_type = "qwen2";
  for (const auto& c : {LlamaConfig::from_json(llama, "llama"), LlamaConfig::from_json(qwen2.to_json(), "qwen2")}) {
    LlamaForCausalLM model(c);
    randomize(*model, 7);
    auto w = weights_of(*model);
    const bool is_qwen2 = c.model_type == "qwen2";
    EXPECT_EQ(w.count("model.layers.0.mlp.gate_proj.bias") + w.count("model.layers.0.mlp.up_proj.bias") +
                  w.count("model.layers.0.mlp.down_proj.bias"),
              is_qwen2 ? 0u : 3u);
    EXPECT_EQ(w.count("model.layers.0.self_attn.q_proj.bias") + w.count("model.layers.0.self_attn.k_proj.bias") +
                  w.count("model.layers.0.self_attn.v_proj.bias"),
              is_qwen2 ? 3u : 0u);
    EXPECT_FALSE(w.count("model.layers.0.self_attn.o_proj.bias"));
    EXPECT_EQ(c.parameter_count(), counted_parameters(*model)) << c.model_type;
    auto tokens = tokens_for(c.vocab_size, 9);
    torch::NoGradGuard no_grad;
    expect_formulas(model->forward(tokens), w, [&](const Weights& v) { return llama_ref(v, c, tokens); });
  }
}

TEST(Llama, EveryLayerReadsOneRotaryTableComputedOncePerShape) {
  auto c = llama_preset("tiny");
  LlamaForCausalLM model(c);
  const auto& table = model->model->rotary;
  for (auto& layer : model->model->layer_list) EXPECT_EQ(layer->self_attn->rotary.get(), table.get());

  auto [cos, sin] = table->cos_sin(6, torch::kCPU, torch::kFloat);
  auto [cos_again, sin_again] = table->cos_sin(6, torch::kCPU, torch::kFloat);
  EXPECT_TRUE(cos_again.is_same(cos));
  EXPECT_TRUE(sin_again.is_same(sin));
  // Position 0 does not rotate; [seq, head_dim], the angles duplicated along the last dim.
  EXPECT_EQ(cos.sizes(), (std::vector<int64_t>{6, c.dim_per_head()}));
  EXPECT_TRUE(torch::equal(cos[0], torch::ones({c.dim_per_head()})));
  const int64_t half = c.dim_per_head() / 2;
  EXPECT_TRUE(torch::equal(sin.narrow(1, 0, half), sin.narrow(1, half, half)));

  EXPECT_FALSE(table->cos_sin(7, torch::kCPU, torch::kFloat).first.is_same(cos));
  auto bf16 = table->cos_sin(7, torch::kCPU, torch::kBFloat16).first;
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
}

TEST(Llama, ARotaryTableMadeUnderInferenceModeIsNotReusedForTraining) {
  // Autograd may not save inference tensors for backward: training after an inference
  // forward of the same shape must get a table of its own.
  auto c = llama_preset("tiny");
  LlamaForCausalLM model(c);
  auto tokens = tokens_for(c.vocab_size, 8);
  {
    c10::InferenceMode inference;
    model->forward(tokens);
  }
  auto loss = model->forward(tokens).square().mean();
  EXPECT_NO_THROW(loss.backward());
  EXPECT_TRUE(model->model->layer_list[0]->self_attn->q_proj->weight.grad().defined());
}

// The fused RMSNorm kernel is CUDA's (models/layers.h): on the CPU either setting runs
// HF's eager formula, bit for bit (the CUDA comparison is CudaModels.FusedRmsNorm...).
TEST(Llama, RmsNormOnTheCpuRunsTheEagerFormulaUnderEitherSetting) {
  torch::manual_seed(4);
  auto x = torch::randn({3, 5, 16}), w = torch::rand({16}) + 0.5;
  models::RmsNorm norm(16, 1e-6);
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(w);
  }
  const auto eager = w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6));
  for (auto kernel : {models::RmsNormKernel::Fused, models::RmsNormKernel::Eager}) {
    models::set_rms_norm_kernel(kernel);
    EXPECT_STREQ(models::rms_norm_kernel_name(torch::Device(torch::kCPU)), "eager");
    EXPECT_TRUE(torch::equal(norm(x), eager));
  }
  models::set_rms_norm_kernel(models::RmsNormKernel::Fused);
  EXPECT_TRUE(torch::allclose(norm(x), rms_norm_ref(x, w, 1e-6), 1.3e-6, 1e-5));
}

TEST(Llama, PresetParameterCountsAreThePublishedOnes) {
  // Hugging Face model cards / safetensors totals of the reference checkpoints.
  EXPECT_EQ(llama_preset("7B").parameter_count(), 6738415616);
  EXPECT_EQ(llama_preset("13B").parameter_count(), 13015864320);
  EXPECT_EQ(llama_preset("70B").parameter_count(), 68976648192);
  EXPECT_EQ(llama_preset("1B").parameter_count(), 1235814400);
  EXPECT_EQ(llama_preset("3B").parameter_count(), 3212749824);
  for (const auto& name : {"tiny", "125M"}) {
    auto c = llama_preset(name);
    LlamaForCausalLM model(c);
    EXPECT_EQ(c.parameter_count(), counted_parameters(*model)) << name;
  }
  EXPECT_THROW(llama_preset("5B"), std::invalid_argument);
}

TEST(Configs, ConfigJsonRoundTripsAndBadValuesNameTheKey) {
  auto c = llama_preset("1B");
  auto back = LlamaConfig::from_json(c.to_json(), "config.json");
  EXPECT_EQ(back.parameter_count(), c.parameter_count());
  EXPECT_TRUE(back.rope_scaling.has_value());
  auto j = c.to_json();
  j.erase("hidden_size");
  try {
    LlamaConfig::from_json(j, "/tmp/m/config.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/tmp/m/config.json: key 'hidden_size' is missing"), std::string::npos)
        << e.what();
  }
  auto g = Gpt2Config{}.to_json();
  g["n_layer"] = "twelve";
  try {
    Gpt2Config::from_json(g, "config.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("key 'n_layer'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(OptConfig::from_json(tiny_opt(false, 12).to_json(), "c").word_embed_proj_dim, 12);
}

// transformers 5 writes rope_parameters {rope_theta, rope_type, ...} in place of top-level
// rope_theta and rope_scaling; both layouts describe the same model.
TEST(Configs, TransformersFiveRopeParametersReadAsTheLegacyKeysDo) {
  auto legacy = llama_preset("1B").to_json();
  auto v5 = legacy;
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = legacy["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = legacy["rope_theta"];
  const auto a = LlamaConfig::from_json(legacy, "legacy"), b = LlamaConfig::from_json(v5, "v5");
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  ASSERT_TRUE(b.rope_scaling.has_value());
  EXPECT_EQ(a.rope_scaling->factor, b.rope_scaling->factor);
  EXPECT_EQ(a.rope_scaling->original_max_position_embeddings, b.rope_scaling->original_max_position_embeddings);
  EXPECT_TRUE(torch::equal(rope_inverse_frequencies(a), rope_inverse_frequencies(b)));

  auto plain = v5;
  plain["rope_parameters"] = {{"rope_theta", 123456.0}, {"rope_type", "default"}};
  const auto p = LlamaConfig::from_json(plain, "plain");
  EXPECT_EQ(p.rope_theta, 123456.0);
  EXPECT_FALSE(p.rope_scaling.has_value());
}

// A Llama-like config.json refused in one line naming the file and holding `words`.
void expect_refused(const nlohmann::json& config, const std::string& words) {
  try {
    LlamaConfig::from_json(config, "/m/config.json");
    ADD_FAILURE() << "accepted: " << config.dump();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/m/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Configs, ARopeSettingFsdppDoesNotComputeIsRefusedNamingTheFileAndKey) {
  auto c = llama_preset("tiny").to_json();
  c["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "yarn"}, {"factor", 4.0}};
  expect_refused(c, "rope_type 'yarn'");
  c["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}, {"factor", 4.0}};
  expect_refused(c, "key 'factor'");
  c["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  expect_refused(c, "partial_rotary_factor");
  c["rope_parameters"] = {{"rope_theta", 20000.0}, {"rope_type", "default"}};
  c["rope_theta"] = 10000.0;
  expect_refused(c, "disagree");
}

// Issue 41: every key of a Llama-like config.json is computed, listed as not changing the
// math, or refused in one line naming the file, the key and its value.

TEST(Configs, AKeyTheFamilyDoesNotKnowIsRefusedNamingItAndItsValue) {
  auto c = llama_preset("tiny").to_json();
  c["use_mrope"] = true;
  expect_refused(c, "key 'use_mrope' (true) is not one fsdpp knows for model_type 'llama'");
  auto mistral = llama_preset("tiny").to_json();
  mistral["model_type"] = "mistral";
  EXPECT_NO_THROW(LlamaConfig::from_json(mistral, "m"));  // attention_bias, mlp_bias false: Mistral's own
  mistral["mlp_bias"] = true;
  expect_refused(mistral, "key 'mlp_bias' is true, but mistral computes it as false only");
  auto dropout = llama_preset("tiny").to_json();
  dropout["attention_dropout"] = 0.1;
  expect_refused(dropout, "key 'attention_dropout' is 0.1");
  // What transformers writes for every PreTrainedConfig reads as no change.
  auto generic = llama_preset("tiny").to_json();
  for (const auto& key : {"transformers_version", "dtype", "use_cache", "bos_token_id", "id2label", "return_dict"})
    generic[key] = nullptr;
  EXPECT_NO_THROW(LlamaConfig::from_json(generic, "g"));
}

// transformers' Qwen2Config.__post_init__: the window only with use_sliding_window, and then
// for layers from max_window_layers on, unless layer_types names each layer.
TEST(Configs, QwenLayersSlideByTransformersRulesAndASlidingLayerWithoutAWindowIsRefused) {
  auto qwen = llama_preset("tiny");  // 2 layers
  qwen.model_type = "qwen2";
  auto c = qwen.to_json();
  c.erase("layer_types");
  c["use_sliding_window"] = true, c["sliding_window"] = 8, c["max_window_layers"] = 2;
  auto windows = [](const nlohmann::json& json) {
    const auto read = LlamaConfig::from_json(json, "q");
    return std::vector<int64_t>{read.window_of_layer(0), read.window_of_layer(1)};
  };
  EXPECT_EQ(windows(c), (std::vector<int64_t>{0, 0}));  // no layer from 2 on
  c["max_window_layers"] = 1;
  EXPECT_EQ(windows(c), (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(windows(LlamaConfig::from_json(c, "q").to_json()), (std::vector<int64_t>{0, 8}));
  c["use_sliding_window"] = false;
  EXPECT_EQ(windows(c), (std::vector<int64_t>{0, 0}));  // sliding_window is None then
  c["layer_types"] = {"full_attention", "sliding_attention"};
  expect_refused(c, "layer 1 is a sliding_attention layer, but the config gives no window");
  c["use_sliding_window"] = true;
  EXPECT_EQ(windows(c), (std::vector<int64_t>{0, 8}));
  c["layer_types"] = {"full_attention", "chunked_attention"};
  expect_refused(c, "key 'layer_types' makes layer 1 \"chunked_attention\"");
  c["layer_types"] = {"full_attention"};
  expect_refused(c, "expected a list of 2 layer types");
}

// The family's own config on export: transformers' keys and class name, read back as the
// same model; defaults that are the family's own (Qwen3's head_dim 128).
TEST(Configs, EachFamilyExportsItsOwnConfigAndReadsItBack) {
  const std::map<std::string, std::string> kClasses = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"}, {"gemma2", "Gemma2ForCausalLM"},   {"gemma3_text", "Gemma3ForCausalLM"},
      {"phi3", "Phi3ForCausalLM"},   {"mixtral", "MixtralForCausalLM"}, {"qwen3_moe", "Qwen3MoeForCausalLM"},
      {"phi", "PhiForCausalLM"}};
  for (const std::string& type : llama_model_types()) {
    const bool gemma = type.rfind("gemma", 0) == 0;
    auto c = LlamaConfig::from_json(
        [&] {
          auto j = llama_preset("tiny").to_json();
          j["model_type"] = type;
          if (type != "llama") j.erase("mlp_bias");
          if (type != "llama" && type != "qwen3" && type != "qwen3_moe" && !gemma) j.erase("attention_bias");
          if (gemma) j["hidden_activation"] = j["hidden_act"], j.erase("hidden_act");
          if (type == "phi") {
            j["layer_norm_eps"] = j["rms_norm_eps"], j["hidden_act"] = "gelu_new";
            for (const char* key : {"rms_norm_eps", "head_dim", "attention_bias"}) j.erase(key);
          }
          return j;
        }(),
        type);
    const auto j = c.to_json();
    EXPECT_EQ(j["model_type"], type);
    EXPECT_EQ(j["architectures"], nlohmann::json::array({kClasses.at(type)}));
    const auto back = LlamaConfig::from_json(j, type);
    EXPECT_EQ(back.parameter_count(), c.parameter_count()) << type;
    EXPECT_EQ(back.qkv_bias, type == "qwen2" || type == "phi") << type;
    EXPECT_EQ(back.qk_norm, type == "qwen3" || type == "qwen3_moe" || type == "gemma3_text") << type;
    EXPECT_EQ(back.gemma_norms, gemma) << type;
    EXPECT_EQ(back.sliding_layers, c.sliding_layers) << type;
    EXPECT_EQ(back.final_logit_softcapping, c.final_logit_softcapping) << type;
    EXPECT_EQ(back.local_rope_theta, c.local_rope_theta) << type;
    EXPECT_EQ(back.pad_token_id, c.pad_token_id) << type;
  }
  auto qwen3 = llama_preset("tiny");
  qwen3.model_type = "qwen3";
  auto j = qwen3.to_json();
  j.erase("head_dim");
  EXPECT_EQ(LlamaConfig::from_json(j, "q").dim_per_head(), 128);
}

// Gemma 2 (Gemma Team, 2024) and Gemma 3 as transformers' Gemma2/Gemma3 modeling files
// write them: RMSNorm times (1 + w); embeddings times sqrt(hidden); a norm after attention
// and around the MLP; GeGLU (tanh GELU); scores scaled by query_pre_attn_scalar^-1/2 and
// soft-capped; sliding layers see `window` keys; Gemma 3's q/k norms and its sliding layers'
// own rope base; final logits soft-capped.
Tensor gemma_ref(const Weights& w, const LlamaConfig& c, const Tensor& tokens) {
  const int64_t hd = c.dim_per_head(), heads = c.num_attention_heads, kv = c.num_key_value_heads;
  auto norm = [&](const Tensor& x, const std::string& name) { return rms_norm_ref(x, 1 + w.at(name), c.rms_norm_eps); };
  auto x = w.at("model.embed_tokens.weight").index({tokens}) * std::sqrt(static_cast<double>(c.hidden_size));
  auto global = inv_freq_ref(c) / c.rope_linear_factor;
  LlamaConfig local_config = c;
  local_config.rope_theta = c.local_rope_theta;
  auto local = inv_freq_ref(local_config);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    const int64_t window = c.sliding_layers.at(static_cast<size_t>(i)) ? c.sliding_window : 0;
    const auto& inv = window > 0 && c.local_rope_theta > 0 ? local : global;
    auto head_norm = [&](const Tensor& t, const std::string& name, int64_t n) {
      if (!w.count(p + name)) return t;
      return norm(t.view({t.size(0), t.size(1), n, hd}), p + name).view(t.sizes());
    };
    auto a = norm(x, p + "input_layernorm.weight");
    auto q =
        rope_ref(head_norm(linear_ref(w, p + "self_attn.q_proj", a), "self_attn.q_norm.weight", heads), inv, heads, hd);
    auto k = rope_ref(head_norm(linear_ref(w, p + "self_attn.k_proj", a), "self_attn.k_norm.weight", kv), inv, kv, hd);
    auto y = attention_ref(q, k, linear_ref(w, p + "self_attn.v_proj", a), heads, kv, hd,
                           1.0 / std::sqrt(c.query_pre_attn_scalar), window, c.attn_logit_softcapping);
    x = x + norm(linear_ref(w, p + "self_attn.o_proj", y), p + "post_attention_layernorm.weight");
    auto m = norm(x, p + "pre_feedforward_layernorm.weight");
    auto gate = linear_ref(w, p + "mlp.gate_proj", m);
    auto gelu = 0.5 * gate * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (gate + 0.044715 * gate.pow(3))));
    x = x + norm(linear_ref(w, p + "mlp.down_proj", gelu * linear_ref(w, p + "mlp.up_proj", m)),
                 p + "post_feedforward_layernorm.weight");
  }
  x = norm(x, "model.norm.weight");
  auto logits = torch::matmul(x, w.at(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight").t());
  const double cap = c.final_logit_softcapping;
  return cap > 0 ? cap * torch::tanh(logits / cap) : logits;
}

TEST(Llama, Gemma2And3LayersMatchThePublishedFormulas) {
  nlohmann::json gemma2 = {{"model_type", "gemma2"},
                           {"vocab_size", 97},
                           {"hidden_size", 16},
                           {"intermediate_size", 40},
                           {"num_hidden_layers", 3},
                           {"num_attention_heads", 4},
                           {"num_key_value_heads", 2},
                           {"head_dim", 6},
                           {"sliding_window", 3},
                           {"query_pre_attn_scalar", 5},
                           {"attn_logit_softcapping", 2.0},
                           {"final_logit_softcapping", 4.0}};
  auto gemma3 = gemma2;
  gemma3["model_type"] = "gemma3_text";
  gemma3.erase("attn_logit_softcapping");
  gemma3.erase("final_logit_softcapping");
  gemma3["sliding_window_pattern"] = 2;  // sliding, full, sliding
  gemma3["rope_local_base_freq"] = 50.0;
  gemma3["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  gemma3["tie_word_embeddings"] = false;
  for (const auto& json : {gemma2, gemma3}) {
    const auto c = LlamaConfig::from_json(json, "gemma");
    LlamaForCausalLM model(c);
    randomize(*model, 8);
    auto w = weights_of(*model);
    EXPECT_EQ(w.count("model.layers.0.pre_feedforward_layernorm.weight"), 1u);
    EXPECT_EQ(w.count("model.layers.0.self_attn.q_norm.weight"), c.model_type == "gemma3_text" ? 1u : 0u);
    EXPECT_EQ(c.parameter_count(), counted_parameters(*model)) << c.model_type;
    auto tokens = tokens_for(c.vocab_size, 9);  // longer than the window
    torch::NoGradGuard no_grad;
    expect_formulas(model->forward(tokens), w, [&](const Weights& v) { return gemma_ref(v, c, tokens); });
  }
}

// transformers' defaults where a Gemma config.json is silent: Gemma 2 slides on even layers
// with caps 50 and 30 and a tied head; Gemma 3 slides but every sixth layer, caps off, its
// sliding layers rotate at base 10000 and the others at 1e6; both pad at token 0.
TEST(Configs, GemmaDefaultsAreTransformersOwn) {
  nlohmann::json j = {{"model_type", "gemma2"},  {"vocab_size", 97},       {"hidden_size", 16},
                      {"intermediate_size", 40}, {"num_hidden_layers", 7}, {"num_attention_heads", 4}};
  const auto two = LlamaConfig::from_json(j, "g2");
  EXPECT_EQ(two.sliding_layers, (std::vector<bool>{true, false, true, false, true, false, true}));
  EXPECT_EQ(two.sliding_window, 4096);
  EXPECT_EQ(two.attn_logit_softcapping, 50.0);
  EXPECT_EQ(two.final_logit_softcapping, 30.0);
  EXPECT_EQ(two.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(two.dim_per_head(), 256);
  EXPECT_TRUE(two.tie_word_embeddings);
  EXPECT_EQ(two.pad_token_id, 0);
  EXPECT_EQ(two.hidden_act, "gelu_pytorch_tanh");
  j["model_type"] = "gemma3_text";
  const auto three = LlamaConfig::from_json(j, "g3");
  EXPECT_EQ(three.sliding_layers, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_EQ(three.attn_logit_softcapping, 0.0);
  EXPECT_EQ(three.final_logit_softcapping, 0.0);
  EXPECT_EQ(three.rope_theta, 1e6);
  EXPECT_EQ(three.local_rope_theta, 1e4);
  EXPECT_TRUE(three.qk_norm);
  j["model_type"] = "gemma2";
  j["final_logit_softcapping"] = nullptr;  // null is "no cap", not the default
  EXPECT_EQ(LlamaConfig::from_json(j, "g2").final_logit_softcapping, 0.0);
}

// transformers 5's nested rope_parameters and 4.x's rope_theta / rope_local_base_freq /
// rope_scaling describe the same Gemma 3; what fsdpp writes reads back as it was.
TEST(Configs, Gemma3RopeByLayerTypeReadsInBothLayoutsAndRoundTrips) {
  nlohmann::json v4 = {{"model_type", "gemma3_text"},
                       {"vocab_size", 97},
                       {"hidden_size", 16},
                       {"intermediate_size", 40},
                       {"num_hidden_layers", 2},
                       {"num_attention_heads", 4},
                       {"rope_theta", 2e5},
                       {"rope_local_base_freq", 300.0},
                       {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}};
  auto v5 = v4;
  for (const auto* key : {"rope_theta", "rope_local_base_freq", "rope_scaling"}) v5.erase(key);
  v5["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 2e5}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 300.0}}}};
  for (const auto& json : {v4, v5, LlamaConfig::from_json(v4, "v4").to_json()}) {
    const auto c = LlamaConfig::from_json(json, "g3");
    EXPECT_EQ(c.rope_theta, 2e5);
    EXPECT_EQ(c.local_rope_theta, 300.0);
    EXPECT_EQ(c.rope_linear_factor, 8.0);
  }
  v5["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  expect_refused(v5, "rope_parameters.sliding_attention scales its rope");
  v5["rope_parameters"] = {{"global", {{"rope_type", "default"}}}};
  expect_refused(v5, "rope_parameters key 'global' is not a layer type");
}

// Gemma 2 2B and Gemma 3 1B as transformers counts them (num_parameters() of the model
// built from the published config.json: the tied head once); the tiny shapes by their own
// parameters. From scratch, Gemma's norms start at 0 (they multiply by 1 + w).
TEST(Configs, GemmaPresetsHaveTheirPublishedParameterCountsAndZeroNorms) {
  auto preset = [](const std::string& type, const std::string& size) {
    return LlamaConfig::from_json(from_scratch_config(type, size), type + " " + size);
  };
  EXPECT_EQ(preset("gemma2", "2B").parameter_count(), 2614341888);
  EXPECT_EQ(preset("gemma3_text", "1B").parameter_count(), 999885952);
  for (const char* type : {"gemma2", "gemma3_text"}) {
    auto lm = build_causal_lm(from_scratch_config(type, "tiny"), type);
    EXPECT_EQ(preset(type, "tiny").parameter_count(), counted_parameters(*lm.module)) << type;
    init_from_scratch(lm, 3);
    auto params = lm.module->named_parameters(true);
    EXPECT_TRUE(torch::equal(params["model.layers.0.pre_feedforward_layernorm.weight"],
                             torch::zeros({lm.config["hidden_size"].get<int64_t>()})));
    EXPECT_GT(params["model.embed_tokens.weight"].abs().sum().item<double>(), 0.0);
  }
  EXPECT_EQ(initial_norm_weight("llama"), 1.0);
}

// Phi3Attention and Phi3MLP: one qkv_proj whose output is [q | k | v] and one gate_up_proj
// whose output is [gate | up], rope on the first half of each head (partial_rotary_factor
// 0.5); the same model as Llama's with those tensors split.
TEST(Llama, Phi3FusedProjectionsAndPartialRotaryMatchThePublishedFormulas) {
  const auto c = LlamaConfig::from_json(from_scratch_config("phi3", "tiny"), "phi3 tiny");
  ASSERT_EQ(c.rotary_dims(), c.dim_per_head() / 2);
  LlamaForCausalLM model(c);
  randomize(*model, 9);
  auto w = weights_of(*model);
  const int64_t q = c.num_attention_heads * c.dim_per_head(), kv = c.num_key_value_heads * c.dim_per_head();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto qkv = w.at(p + "self_attn.qkv_proj.weight");
    ASSERT_EQ(qkv.size(0), q + 2 * kv);
    w[p + "self_attn.q_proj.weight"] = qkv.narrow(0, 0, q);
    w[p + "self_attn.k_proj.weight"] = qkv.narrow(0, q, kv);
    w[p + "self_attn.v_proj.weight"] = qkv.narrow(0, q + kv, kv);
    auto gate_up = w.at(p + "mlp.gate_up_proj.weight");
    w[p + "mlp.gate_proj.weight"] = gate_up.narrow(0, 0, c.intermediate_size);
    w[p + "mlp.up_proj.weight"] = gate_up.narrow(0, c.intermediate_size, c.intermediate_size);
  }
  EXPECT_EQ(c.parameter_count(), counted_parameters(*model));
  auto tokens = tokens_for(c.vocab_size, 10);
  torch::NoGradGuard no_grad;
  expect_formulas(model->forward(tokens), w, [&](const Weights& v) { return llama_ref(v, c, tokens); });
}

// Phi-3 mini and Phi-4 as transformers counts them (num_parameters() of Phi3ForCausalLM built
// from their config.json shapes); a rotary fraction is Phi-3's only, and is refused elsewhere.
TEST(Configs, Phi3PresetsHaveTheirPublishedParameterCountsAndPartialRotaryIsPhi3s) {
  EXPECT_EQ(LlamaConfig::from_json(from_scratch_config("phi3", "3.8B"), "p").parameter_count(), 3821079552);
  EXPECT_EQ(LlamaConfig::from_json(from_scratch_config("phi3", "14B"), "p").parameter_count(), 14659507200);
  auto llama = llama_preset("tiny").to_json();
  llama["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  expect_refused(llama, "partial_rotary_factor other than 1.0 is not supported for llama");
  auto phi3 = from_scratch_config("phi3", "tiny");
  phi3["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  expect_refused(phi3, "rope_type 'longrope' is not supported");
  phi3.erase("rope_scaling");
  phi3["resid_pdrop"] = 0.1;
  expect_refused(phi3, "key 'resid_pdrop' is 0.1");
}

// A sparse MLP written densely: every token's output is the sum over its k highest-probability
// experts (softmax over all of them) of the weight (renormalised over the k when `normalize`)
// times that expert's down(silu(gate x) * up x); `names` are the gate, up and down tensors.
torch::Tensor sparse_moe_ref(const Weights& w, const std::string& p, const torch::Tensor& x_in, int64_t k,
                             bool normalize, const std::array<std::string, 3>& names) {
  const auto x = x_in.to(w.begin()->second.scalar_type());
  auto probs = softmax_ref(linear_ref(w, p + "gate", x));
  auto expected = torch::zeros_like(x);
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t t = 0; t < x.size(1); ++t) {
      auto top = std::get<1>(probs[b][t].topk(k));
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += probs[b][t][top[j]].item<double>();
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = top[j].item<int64_t>();
        const std::string ex = p + "experts." + std::to_string(e) + ".";
        auto h = x[b][t];
        auto gate = linear_ref(w, ex + names[0], h);
        auto y = linear_ref(w, ex + names[2], gate * torch::sigmoid(gate) * linear_ref(w, ex + names[1], h));
        expected[b][t] += y * (probs[b][t][e].item<double>() / (normalize ? sum : 1.0));
      }
    }
  return expected;
}

// Mixtral's sparse MLP: two of four experts, renormalised, named w1 (gate), w3 (up), w2 (down).
TEST(Llama, MixtralSparseExpertsMatchThePublishedFormulas) {
  const auto c = LlamaConfig::from_json(from_scratch_config("mixtral", "tiny"), "mixtral tiny");
  ASSERT_EQ(c.num_experts, 4);
  LlamaForCausalLM model(c);
  randomize(*model, 10);
  auto w = weights_of(*model);
  auto tokens = tokens_for(c.vocab_size, 10);
  torch::NoGradGuard no_grad;
  // The model's own MoE block on the normalised hidden states of layer 0, against the formula.
  auto x = torch::randn({2, 10, c.hidden_size});
  expect_formulas(model->model->layer_list[0]->moe->forward(x), w, [&](const Weights& v) {
    return sparse_moe_ref(v, "model.layers.0.block_sparse_moe.", x, 2, true, {"w1", "w3", "w2"});
  });
  EXPECT_EQ(c.parameter_count(), counted_parameters(*model));
  EXPECT_EQ(model->forward(tokens).sizes(), (std::vector<int64_t>{2, 10, c.vocab_size}));
}

// Qwen3-MoE: the experts under `mlp` named gate_proj/up_proj/down_proj, top-k weights not
// renormalised (norm_topk_prob false), and mlp_only_layers' layer a dense MLP of
// intermediate_size while the others' experts are moe_intermediate_size wide.
TEST(Llama, Qwen3MoeExpertsAndDenseLayersMatchThePublishedFormulas) {
  const auto c = LlamaConfig::from_json(from_scratch_config("qwen3_moe", "tiny"), "qwen3_moe tiny");
  ASSERT_FALSE(c.normalize_top_k);
  ASSERT_TRUE(c.is_sparse_layer(0));
  ASSERT_FALSE(c.is_sparse_layer(1));
  LlamaForCausalLM model(c);
  randomize(*model, 11);
  auto w = weights_of(*model);
  EXPECT_EQ(w.at("model.layers.0.mlp.experts.3.gate_proj.weight").sizes(),
            (std::vector<int64_t>{c.moe_intermediate_size, c.hidden_size}));
  EXPECT_EQ(w.at("model.layers.1.mlp.gate_proj.weight").sizes(),
            (std::vector<int64_t>{c.intermediate_size, c.hidden_size}));
  EXPECT_EQ(w.count("model.layers.1.mlp.gate.weight"), 0U);
  EXPECT_EQ(c.parameter_count(), counted_parameters(*model));
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 7, c.hidden_size});
  expect_formulas(model->model->layer_list[2]->moe->forward(x), w, [&](const Weights& v) {
    return sparse_moe_ref(v, "model.layers.2.mlp.", x, 2, false, {"gate_proj", "up_proj", "down_proj"});
  });
  // The dense layer: SwiGLU, down(silu(gate(x)) * up(x)).
  ASSERT_TRUE(model->model->layer_list[1]->mlp);
  expect_formulas(model->model->layer_list[1]->mlp->forward(x), w, [&](const Weights& v) {
    const std::string p = "model.layers.1.mlp.";
    const auto h = x.to(v.begin()->second.scalar_type());
    const auto gate = linear_ref(v, p + "gate_proj", h);
    return linear_ref(v, p + "down_proj", gate * torch::sigmoid(gate) * linear_ref(v, p + "up_proj", h));
  });
}

// transformers' load_balancing_loss_func without a mask: over every layer's tokens, f_e the
// share of the k picks that went to expert e and P_e the mean router probability of e;
// num_experts * sum_e f_e * P_e, with a gradient through P only. Counted here by hand.
TEST(Llama, LoadBalancingLossIsSwitchTransformersFormulaOverEveryLayer) {
  torch::manual_seed(5);
  const int64_t experts = 4, k = 2;
  RouterLogits logits = {torch::randn({6, experts}, torch::requires_grad()),
                         torch::randn({6, experts}, torch::requires_grad())};
  auto loss = load_balancing_loss(logits, experts, k);
  std::vector<double> picks(experts, 0.0), probability(experts, 0.0);
  double rows = 0;
  for (const auto& l : logits) {
    auto probs = torch::softmax(l.detach().to(torch::kDouble), -1);
    for (int64_t t = 0; t < l.size(0); ++t) {
      auto top = std::get<1>(probs[t].topk(k));
      for (int64_t j = 0; j < k; ++j) picks[static_cast<size_t>(top[j].item<int64_t>())] += 1;
      for (int64_t e = 0; e < experts; ++e) probability[static_cast<size_t>(e)] += probs[t][e].item<double>();
      rows += 1;
    }
  }
  double expected = 0;
  for (size_t e = 0; e < picks.size(); ++e) expected += picks[e] / rows * (probability[e] / rows);
  expected *= static_cast<double>(experts);
  EXPECT_NEAR(loss.item<double>(), expected, 1e-6);
  loss.backward();
  // d loss / d P_e = experts * f_e / rows for every token's probabilities: a nonzero gradient.
  EXPECT_GT(logits[0].grad().abs().sum().item<double>(), 0.0);
}

// With output_router_logits the model records every sparse layer's router logits of a
// forward pass run with gradients, and its auxiliary_loss is router_aux_loss_coef times
// the load-balancing loss over them; without gradients (evaluation) nothing is recorded.
TEST(Llama, AuxiliaryLossIsTheCoefficientTimesTheLoadBalancingLossOfTheLastForward) {
  auto json = from_scratch_config("qwen3_moe", "tiny");
  json["output_router_logits"] = true;
  json["router_aux_loss_coef"] = 0.25;
  auto lm = build_causal_lm(json, "qwen3_moe");
  ASSERT_TRUE(lm.auxiliary_loss);
  init_from_scratch(lm, 4);
  auto model = std::dynamic_pointer_cast<LlamaForCausalLMImpl>(lm.module);
  ASSERT_TRUE(model);
  auto tokens = tokens_for(json["vocab_size"].get<int64_t>(), 9);
  {
    torch::NoGradGuard no_grad;
    lm.logits(tokens);
    EXPECT_TRUE(model->router_logits->empty());
  }
  lm.logits(tokens);
  ASSERT_EQ(model->router_logits->size(), 2U);  // layers 0 and 2; layer 1 is dense
  const auto recorded = *model->router_logits;
  EXPECT_NEAR(lm.auxiliary_loss().item<double>(), 0.25 * load_balancing_loss(recorded, 4, 2).item<double>(), 1e-7);
  EXPECT_FALSE(build_causal_lm(from_scratch_config("qwen3_moe", "tiny"), "q").auxiliary_loss);
}

// Mixtral 8x7B as transformers counts it (MixtralForCausalLM from its config.json shape); the
// router settings transformers uses in training and fsdpp does not compute are refused.
TEST(Configs, MixtralPresetHasItsPublishedCountAndRouterJitterIsRefused) {
  EXPECT_EQ(LlamaConfig::from_json(from_scratch_config("mixtral", "8x7B"), "m").parameter_count(), 46702792704);
  auto c = from_scratch_config("mixtral", "tiny");
  c["output_router_logits"] = true;
  EXPECT_TRUE(LlamaConfig::from_json(c, "m").output_router_logits);
  c["router_jitter_noise"] = 0.01;
  expect_refused(c, "key 'router_jitter_noise' is 0.01");
  c["router_jitter_noise"] = 0.0;
  c["num_experts_per_tok"] = 5;
  expect_refused(c, "num_experts_per_tok is 5 of num_local_experts 4");
}

// Qwen2.5, Qwen3 and Qwen3-MoE's published sizes as transformers counts them
// (num_parameters() of the model built from each config.json shape, the tied head once).
TEST(Configs, QwenPresetsHaveTheirPublishedParameterCounts) {
  auto count = [](const std::string& type, const std::string& size) {
    return LlamaConfig::from_json(from_scratch_config(type, size), type + " " + size).parameter_count();
  };
  EXPECT_EQ(count("qwen2", "0.5B"), 494032768);
  EXPECT_EQ(count("qwen2", "1.5B"), 1543714304);
  EXPECT_EQ(count("qwen2", "7B"), 7615616512);
  EXPECT_EQ(count("qwen3", "0.6B"), 596049920);
  EXPECT_EQ(count("qwen3", "1.7B"), 1720574976);
  EXPECT_EQ(count("qwen3", "4B"), 4022468096);
  EXPECT_EQ(count("qwen3", "8B"), 8190735360);
  EXPECT_EQ(count("qwen3_moe", "30B-A3B"), 30532122624);
  for (const char* type : {"qwen2", "qwen3", "qwen3_moe"}) {
    auto lm = build_causal_lm(from_scratch_config(type, "tiny"), type);
    EXPECT_EQ(count(type, "tiny"), counted_parameters(*lm.module)) << type;
  }
}

// Phi-1.5 and Phi-2 as transformers counts them (PhiForCausalLM from their config.json
// shapes: biased projections and head, LayerNorms with biases), the tiny shape by its own
// parameters; what fsdpp's Phi does not compute is refused in one line each.
TEST(Configs, PhiPresetsHaveTheirPublishedCountsAndUncomputedKeysAreRefused) {
  auto count = [](const std::string& size) {
    return LlamaConfig::from_json(from_scratch_config("phi", size), "phi " + size).parameter_count();
  };
  EXPECT_EQ(count("1.3B"), 1418270720);
  EXPECT_EQ(count("2.7B"), 2779683840);
  auto lm = build_causal_lm(from_scratch_config("phi", "tiny"), "phi");
  EXPECT_EQ(count("tiny"), counted_parameters(*lm.module));
  EXPECT_EQ(lm.block_type, "fsdpp::models::PhiDecoderLayerImpl");
  auto params = lm.module->named_parameters(true);
  for (const char* name : {"lm_head.bias", "model.final_layernorm.bias", "model.layers.1.self_attn.dense.bias",
                           "model.layers.0.self_attn.q_layernorm.weight", "model.layers.0.mlp.fc2.bias"})
    EXPECT_TRUE(params.contains(name)) << name;
  auto c = from_scratch_config("phi", "tiny");
  const auto read = LlamaConfig::from_json(c, "phi");
  EXPECT_EQ(read.rotary_dims(), read.dim_per_head() / 2);
  EXPECT_EQ(LlamaConfig::from_json(read.to_json(), "phi").parameter_count(), read.parameter_count());
  c["tie_word_embeddings"] = true;
  expect_refused(c, "key 'tie_word_embeddings' is true");
  c["tie_word_embeddings"] = false;
  c["hidden_act"] = "gelu";
  expect_refused(c, "key 'hidden_act' is \"gelu\"; fsdpp's Phi computes gelu_new only");
  c["hidden_act"] = "gelu_new";
  c["head_dim"] = 8;
  expect_refused(c, "key 'head_dim' (8) is not one fsdpp knows for model_type 'phi'");
  c.erase("head_dim");
  c["resid_pdrop"] = 0.1;
  expect_refused(c, "key 'resid_pdrop' is 0.1");
}

// Falcon-7B as transformers counts it (FalconForCausalLM from FalconConfig's defaults, which
// are Falcon-7B's: multi-query, a tied head), every block shape by its own parameters, and
// what fsdpp's Falcon does not compute refused in one line each.
TEST(Configs, FalconPresetsHaveTheirPublishedCountAndUncomputedKeysAreRefused) {
  EXPECT_EQ(FalconConfig::from_json(from_scratch_config("falcon", "7B"), "falcon 7B").parameter_count(), 6921720704);
  auto tiny = from_scratch_config("falcon", "tiny");
  for (const auto& [architecture, parallel, bias] :
       std::vector<std::tuple<bool, bool, bool>>{{true, true, false}, {false, true, true}, {false, false, true}}) {
    auto j = tiny;
    j["new_decoder_architecture"] = architecture, j["parallel_attn"] = parallel, j["bias"] = bias;
    j["multi_query"] = parallel;
    if (!architecture) j.erase("num_kv_heads"), j.erase("num_ln_in_parallel_attn");
    auto lm = build_causal_lm(j, "falcon");
    EXPECT_EQ(FalconConfig::from_json(j, "falcon").parameter_count(), counted_parameters(*lm.module)) << j.dump();
    EXPECT_EQ(lm.logits(tokens_for(97, 5)).sizes(), (std::vector<int64_t>{2, 5, 97}));
  }
  auto expect_refused = [](const nlohmann::json& config, const std::string& words) {
    try {
      parse_causal_lm_config(config, "/m/config.json");
      ADD_FAILURE() << "accepted: " << config.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("/m/config.json: " + words), std::string::npos) << e.what();
    }
  };
  tiny["alibi"] = true;
  expect_refused(tiny, "key 'alibi' is true; ALiBi is not implemented");
  tiny["alibi"] = false;
  tiny["hidden_dropout"] = 0.1;
  expect_refused(tiny, "key 'hidden_dropout' is 0.1");
  tiny["hidden_dropout"] = 0.0;
  tiny["parallel_attn"] = false;
  expect_refused(tiny, "key 'parallel_attn' is false; the new decoder architecture runs attention and MLP in parallel");
  tiny["parallel_attn"] = true;
  tiny["n_head"] = 4;
  expect_refused(tiny, "key 'n_head' (4) is not one fsdpp knows for model_type 'falcon'");
}

// GPT-2's and OPT's readers know every key of their transformers configs and of the Hub's
// files (openai-community/gpt2, facebook/opt-125m): those are read, or listed as not
// changing the math; an unknown key, or a known one at a value fsdpp does not compute
// (GPT-2's scale_attn_by_inverse_layer_idx, OPT's untied head), is refused in one line.
TEST(Configs, Gpt2AndOptReadersKnowTheirHubKeysAndRefuseTheRest) {
  auto refused = [](const nlohmann::json& config, const std::string& words) {
    try {
      parse_causal_lm_config(config, "/m/config.json");
      ADD_FAILURE() << "accepted: " << config.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("/m/config.json: " + words), std::string::npos) << e.what();
    }
  };
  auto gpt2 = from_scratch_config("gpt2", "tiny");
  gpt2.update({{"resid_pdrop", 0.1},
               {"embd_pdrop", 0.1},
               {"attn_pdrop", 0.1},
               {"n_ctx", 256},
               {"summary_type", "cls_index"},
               {"task_specific_params", {{"text-generation", {{"max_length", 50}}}}},
               {"bos_token_id", 50256},
               {"eos_token_id", 50256},
               {"scale_attn_weights", true}});
  EXPECT_NO_THROW(parse_causal_lm_config(gpt2, "gpt2"));
  gpt2["scale_attn_by_inverse_layer_idx"] = true;
  refused(gpt2, "key 'scale_attn_by_inverse_layer_idx' is true, but gpt2 computes it as false only");
  gpt2.erase("scale_attn_by_inverse_layer_idx");
  gpt2["n_layers"] = 2;
  refused(gpt2, "key 'n_layers' (2) is not one fsdpp knows for model_type 'gpt2'");

  auto opt = from_scratch_config("opt", "tiny");
  opt.update({{"dropout", 0.1},
              {"attention_dropout", 0.0},
              {"activation_dropout", 0.0},
              {"layerdrop", 0.0},
              {"init_std", 0.02},
              {"prefix", "</s>"},
              {"pad_token_id", 1},
              {"bos_token_id", 2}});
  EXPECT_NO_THROW(parse_causal_lm_config(opt, "opt"));
  opt["tie_word_embeddings"] = false;
  refused(opt, "key 'tie_word_embeddings' is false, but opt computes it as true only");
  opt["tie_word_embeddings"] = true;
  opt["layer_norm_elementwise_affine"] = false;
  refused(opt, "key 'layer_norm_elementwise_affine' is false");
}

// OPT's pad_token_id is its embedding's padding_idx, as OPTDecoder builds it: that row gets
// no gradient from its lookups (absent: OPTConfig's default 1; null: none).
TEST(Configs, OptPadTokenIsTheEmbeddingsPaddingIndex) {
  auto config = from_scratch_config("opt", "tiny");
  EXPECT_EQ(OptConfig::from_json(config, "opt").pad_token_id, -1);  // the preset trains every row
  config.erase("pad_token_id");
  EXPECT_EQ(OptConfig::from_json(config, "opt").pad_token_id, 1);
  auto lm = build_causal_lm(config, "opt");
  auto opt = std::dynamic_pointer_cast<OptForCausalLMImpl>(lm.module);
  ASSERT_TRUE(opt);
  auto& embed_tokens = opt->model->decoder->embed_tokens;
  ASSERT_TRUE(embed_tokens->options.padding_idx().has_value());
  EXPECT_EQ(*embed_tokens->options.padding_idx(), 1);
  // Through the lookup (the tied head's own gradient aside), row 1 gets none.
  embed_tokens->forward(torch::tensor({{1, 3, 1, 4}}, torch::kLong)).sum().backward();
  EXPECT_EQ(embed_tokens->weight.grad()[1].abs().sum().item<double>(), 0.0);
  EXPECT_GT(embed_tokens->weight.grad()[3].abs().sum().item<double>(), 0.0);
}

// Qwen3-MoE's keys: 4.x's num_experts and 5.x's num_local_experts must agree; a sliding
// window (which transformers 4.x and 5.x apply to different layers) and a dense layer past
// the last are refused in one line each.
TEST(Configs, Qwen3MoeKeysAreReadInBothLayoutsOrRefused) {
  auto c = from_scratch_config("qwen3_moe", "tiny");
  c.erase("num_local_experts");
  c["num_experts"] = 4;
  EXPECT_EQ(LlamaConfig::from_json(c, "q").num_experts, 4);
  c["num_local_experts"] = 6;
  expect_refused(c, "key 'num_experts' is 4; it disagrees with num_local_experts 6");
  c.erase("num_experts");
  c["num_local_experts"] = 4;
  c["use_sliding_window"] = true;
  expect_refused(c, "key 'use_sliding_window' is true");
  c["use_sliding_window"] = false;
  c["mlp_only_layers"] = {3};
  expect_refused(c, "key 'mlp_only_layers' is [3]; expected layer indices below num_hidden_layers 3");
  c["mlp_only_layers"] = nlohmann::json::array();
  c["decoder_sparse_step"] = 2;
  const auto stepped = LlamaConfig::from_json(c, "q");
  EXPECT_FALSE(stepped.is_sparse_layer(0));
  EXPECT_TRUE(stepped.is_sparse_layer(1));
}

}  // namespace
}  // namespace fsdpp::models

namespace fsdpp::models {
namespace {

// The registry is the one place a model_type is dispatched: each type belongs to exactly one
// family, the tiny preset of each builds that family's model, whose blocks are the row's
// unit, and an unknown type is refused naming the source and listing every type.
TEST(Families, EachModelTypeHasOneRowWhoseReaderBuildsBlocksOfItsUnit) {
  std::map<std::string, int> rows_of;
  for (const auto& family : families())
    for (const auto& type : family.model_types) ++rows_of[type];
  EXPECT_EQ(rows_of.size(), supported_model_types().size());
  for (const auto& [type, rows] : rows_of) EXPECT_EQ(rows, 1) << type;
  for (const auto& type : llama_model_types()) EXPECT_EQ(rows_of.count(type), 1u) << type;
  for (const auto& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const auto& family = family_of(type, "test");
    auto config = from_scratch_config(type, "tiny");
    auto parsed = family.read(config, "test");
    EXPECT_EQ(parsed.model_type, type);
    auto lm = parsed.build();
    EXPECT_EQ(lm.block_type, family.unit);
    int blocks = 0;
    for (const auto& module : lm.module->modules()) blocks += module->name() == family.unit ? 1 : 0;
    EXPECT_EQ(blocks, config.value("num_hidden_layers", config.value("n_layer", -1)));
    EXPECT_EQ(lm.vocab_size, parsed.limits.vocab_size);
  }
  try {
    family_of("bloom", "/m/config.json");
    ADD_FAILURE() << "bloom has no family";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "/m/config.json: unknown model_type 'bloom' (expected one of " + model_type_list() + ")");
  }
}

}  // namespace
}  // namespace fsdpp::models
