#include "core/models/presets.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "core/io/shape_text.h"
#include "core/models/falcon.h"
#include "core/models/families.h"
#include "core/models/gpt2.h"
#include "core/models/llama.h"
#include "core/models/opt.h"
#include "core/runtime/threads.h"

namespace fsdpp::models {

using io::shape_text;

namespace {

Gpt2Config gpt2(int64_t layers, int64_t embd, int64_t heads, int64_t positions) {
  Gpt2Config c;
  c.n_layer = layers;
  c.n_embd = embd;
  c.n_head = heads;
  c.n_positions = positions;
  return c;
}

OptConfig opt(int64_t layers, int64_t hidden, int64_t heads, int64_t positions, int64_t proj, bool pre_ln) {
  OptConfig c;
  c.num_hidden_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.ffn_dim = 4 * hidden;
  c.max_position_embeddings = positions;
  c.word_embed_proj_dim = proj;
  c.do_layer_norm_before = pre_ln;
  return c;
}

const std::map<std::string, nlohmann::json>& gpt2_sizes() {
  static const std::map<std::string, nlohmann::json> sizes = {
      {"tiny", gpt2(2, 64, 4, 256).to_json()},
      {"mini", gpt2(4, 128, 4, 512).to_json()},
      // The CPU reference of the benchmark matrix (with --vocab-size 8192, seq 128, batch 8).
      {"mini256", gpt2(4, 256, 4, 512).to_json()},
      {"124M", gpt2(12, 768, 12, 1024).to_json()},
      {"355M", gpt2(24, 1024, 16, 1024).to_json()},
      {"774M", gpt2(36, 1280, 20, 1024).to_json()},
      {"1.5B", gpt2(48, 1600, 25, 1024).to_json()}};
  return sizes;
}

const std::map<std::string, nlohmann::json>& opt_sizes() {
  // OPT-350M projects 512-wide embeddings and uses post-LayerNorm blocks, as released.
  static const std::map<std::string, nlohmann::json> sizes = {{"tiny", opt(2, 64, 4, 256, 64, true).to_json()},
                                                              {"mini", opt(4, 128, 4, 512, 128, true).to_json()},
                                                              {"125M", opt(12, 768, 12, 2048, 768, true).to_json()},
                                                              {"350M", opt(24, 1024, 16, 2048, 512, false).to_json()},
                                                              {"1.3B", opt(24, 2048, 32, 2048, 2048, true).to_json()}};
  return sizes;
}

// Gemma's published shapes (google/gemma-2-2b's and google/gemma-3-1b-pt's config.json) and
// the test shape; the rest of each config is the family's transformers default (read back
// through LlamaConfig::from_json, so the defaults are one table's).
LlamaConfig gemma_preset(const std::string& model_type, const std::string& size) {
  nlohmann::json j = {{"model_type", model_type}};
  if (size == "tiny") {
    const auto tiny = llama_preset("tiny");
    j.update({{"vocab_size", tiny.vocab_size},
              {"hidden_size", tiny.hidden_size},
              {"intermediate_size", tiny.intermediate_size},
              {"num_hidden_layers", model_type == "gemma2" ? 2 : 3},
              {"num_attention_heads", tiny.num_attention_heads},
              {"num_key_value_heads", tiny.num_key_value_heads},
              {"head_dim", 2 * tiny.dim_per_head()},
              {"max_position_embeddings", tiny.max_position_embeddings},
              {"sliding_window", 8},
              {"sliding_window_pattern", 3}});
    if (model_type == "gemma2") j.erase("sliding_window_pattern");
  } else if (size == "2B") {  // Gemma 2 2B
    j.update({{"vocab_size", 256000},
              {"hidden_size", 2304},
              {"intermediate_size", 9216},
              {"num_hidden_layers", 26},
              {"num_attention_heads", 8},
              {"num_key_value_heads", 4},
              {"head_dim", 256},
              {"max_position_embeddings", 8192},
              {"sliding_window", 4096}});
  } else {  // Gemma 3 1B
    j.update({{"vocab_size", 262144},
              {"hidden_size", 1152},
              {"intermediate_size", 6912},
              {"num_hidden_layers", 26},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 1},
              {"head_dim", 256},
              {"max_position_embeddings", 32768},
              {"sliding_window", 512},
              {"sliding_window_pattern", 6}});
  }
  return LlamaConfig::from_json(j, model_type + " preset " + size);
}

// Phi-3 mini (microsoft/Phi-3-mini-4k-instruct's config.json) and Phi-4
// (microsoft/phi-4's), and the test shape: Llama's tiny one with a partial rotary.
LlamaConfig phi3_preset(const std::string& size) {
  nlohmann::json j = {{"model_type", "phi3"}};
  if (size == "tiny") {
    auto tiny = llama_preset("tiny");
    tiny.model_type = "phi3";
    j = tiny.to_json();
    j["partial_rotary_factor"] = 0.5;
  } else if (size == "3.8B") {
    j.update({{"vocab_size", 32064},
              {"hidden_size", 3072},
              {"intermediate_size", 8192},
              {"num_hidden_layers", 32},
              {"num_attention_heads", 32},
              {"num_key_value_heads", 32},
              {"max_position_embeddings", 4096},
              {"sliding_window", 2047},
              {"pad_token_id", 32000}});
  } else {  // 14B: Phi-4
    j.update({{"vocab_size", 100352},
              {"hidden_size", 5120},
              {"intermediate_size", 17920},
              {"num_hidden_layers", 40},
              {"num_attention_heads", 40},
              {"num_key_value_heads", 10},
              {"max_position_embeddings", 16384},
              {"rope_theta", 250000.0},
              {"pad_token_id", nullptr}});  // no padding row: a from-scratch run trains every row
  }
  return LlamaConfig::from_json(j, "phi3 preset " + size);
}

// Phi-1.5 and Phi-2 (microsoft/phi-1_5's and microsoft/phi-2's config.json), and the test
// shape: Llama's tiny one with a half rotary and q/k LayerNorms.
LlamaConfig phi_preset(const std::string& size) {
  nlohmann::json j = {{"model_type", "phi"}, {"vocab_size", 51200}, {"num_attention_heads", 32}};
  if (size == "tiny") {
    const auto tiny = llama_preset("tiny");
    j = {{"model_type", "phi"},
         {"vocab_size", tiny.vocab_size},
         {"hidden_size", tiny.hidden_size},
         {"intermediate_size", tiny.intermediate_size},
         {"num_hidden_layers", tiny.num_hidden_layers},
         {"num_attention_heads", tiny.num_attention_heads},
         {"num_key_value_heads", tiny.num_key_value_heads},
         {"max_position_embeddings", tiny.max_position_embeddings},
         {"partial_rotary_factor", 0.5},
         {"qk_layernorm", true}};
  } else if (size == "1.3B") {
    j.update({{"hidden_size", 2048},
              {"intermediate_size", 8192},
              {"num_hidden_layers", 24},
              {"partial_rotary_factor", 0.5}});
  } else {  // 2.7B: Phi-2
    j.update({{"hidden_size", 2560},
              {"intermediate_size", 10240},
              {"num_hidden_layers", 32},
              {"partial_rotary_factor", 0.4}});
  }
  return LlamaConfig::from_json(j, "phi preset " + size);
}

// The CPU benchmark's shape of Qwen3 and Mixtral (harness/bench/matrix.h): 4 layers of
// width 128, 4 heads over 2 key/value heads, 512 positions; a step of a few hundred tokens
// takes a fraction of a second on one core.
LlamaConfig mini_preset(const std::string& model_type, int64_t intermediate) {
  auto c = llama_preset("tiny");
  c.model_type = model_type;
  c.hidden_size = 128;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 512;
  return c;
}

// Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1's config.json), the test shape (Llama's tiny
// one with 4 experts, 2 per token) and the benchmark's mini (8 experts, 2 per token, as 8x7B).
LlamaConfig mixtral_preset(const std::string& size) {
  if (size == "mini") {
    auto c = mini_preset("mixtral", 256);
    c.num_experts = 8;
    c.experts_per_token = 2;
    return LlamaConfig::from_json(c.to_json(), "mixtral preset mini");
  }
  auto c = llama_preset(size == "tiny" ? "tiny" : "7B");
  c.model_type = "mixtral";
  c.num_experts = size == "tiny" ? 4 : 8;
  c.experts_per_token = 2;
  if (size != "tiny") {
    c.intermediate_size = 14336;
    c.num_key_value_heads = 8;
    c.max_position_embeddings = 32768;
    c.rope_theta = 1e6;
    c.rms_norm_eps = 1e-5;
  }
  return LlamaConfig::from_json(c.to_json(), "mixtral preset " + size);
}

// Qwen's published shapes (the config.json of Qwen/Qwen2.5-{0.5B,1.5B,7B},
// Qwen/Qwen3-{0.6B,1.7B,4B,8B} and Qwen/Qwen3-30B-A3B): vocab, hidden, intermediate, layers,
// heads, kv heads, tied embeddings. Qwen3's head_dim is 128 at every size.
struct QwenShape {
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads;
  bool tied;
};

const std::map<std::string, QwenShape>& qwen_shapes(const std::string& model_type) {
  static const std::map<std::string, std::map<std::string, QwenShape>> shapes = {
      {"qwen2",
       {{"0.5B", {151936, 896, 4864, 24, 14, 2, true}},
        {"1.5B", {151936, 1536, 8960, 28, 12, 2, true}},
        {"7B", {152064, 3584, 18944, 28, 28, 4, false}}}},
      {"qwen3",
       {{"0.6B", {151936, 1024, 3072, 28, 16, 8, true}},
        {"1.7B", {151936, 2048, 6144, 28, 16, 8, true}},
        {"4B", {151936, 2560, 9728, 36, 32, 8, true}},
        {"8B", {151936, 4096, 12288, 36, 32, 8, false}}}},
      {"qwen3_moe", {{"30B-A3B", {151936, 2048, 6144, 48, 32, 4, false}}}}};
  return shapes.at(model_type);
}

// Qwen2/2.5, Qwen3 and Qwen3-MoE: the published sizes above, and the test shape: Llama's
// tiny one with the family's options (Qwen3's head_dim twice hidden / heads; Qwen3-MoE with
// a third layer, 4 experts of 2 per token unnormalised, layer 1 dense); Qwen3's mini: the
// benchmark's shape, head_dim 64 (twice hidden / heads, as tiny).
LlamaConfig qwen_preset(const std::string& model_type, const std::string& size) {
  const bool moe = model_type == "qwen3_moe";
  if (size == "mini") {
    auto c = mini_preset(model_type, 384);
    c.head_dim = 2 * c.dim_per_head();
    return LlamaConfig::from_json(c.to_json(), model_type + " preset mini");
  }
  if (size == "tiny") {
    auto c = llama_preset("tiny");
    c.model_type = model_type;
    if (model_type != "qwen2") c.head_dim = 2 * c.dim_per_head();  // Qwen3's trap: not hidden / heads
    if (moe) {
      c.num_hidden_layers = 3;
      c.num_experts = 4;
      c.experts_per_token = 2;
      c.moe_intermediate_size = 24;
      c.normalize_top_k = false;
      c.mlp_only_layers = {1};
    }
    return LlamaConfig::from_json(c.to_json(), model_type + " preset tiny");
  }
  const QwenShape& shape = qwen_shapes(model_type).at(size);
  nlohmann::json j = {{"model_type", model_type},
                      {"vocab_size", shape.vocab},
                      {"hidden_size", shape.hidden},
                      {"intermediate_size", shape.intermediate},
                      {"num_hidden_layers", shape.layers},
                      {"num_attention_heads", shape.heads},
                      {"num_key_value_heads", shape.kv_heads},
                      {"tie_word_embeddings", shape.tied},
                      {"rope_theta", 1e6},
                      {"max_position_embeddings", model_type == "qwen2" ? 32768 : 40960}};
  if (model_type != "qwen2") j["head_dim"] = 128;
  if (moe)
    j.update(
        {{"num_experts", 128}, {"num_experts_per_tok", 8}, {"moe_intermediate_size", 768}, {"norm_topk_prob", true}});
  return LlamaConfig::from_json(j, model_type + " preset " + size);
}

std::string join_keys(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::vector<std::string> from_scratch_sizes(const std::string& model_type) {
  std::vector<std::string> names;
  if (model_type == "gpt2") {
    for (const auto& [name, _] : gpt2_sizes()) names.push_back(name);
  } else if (model_type == "opt") {
    for (const auto& [name, _] : opt_sizes()) names.push_back(name);
  } else if (model_type == "llama" || model_type == "mistral") {
    names = llama_preset_names();
  } else if (model_type == "qwen2" || model_type == "qwen3" || model_type == "qwen3_moe") {
    names = {"tiny"};
    if (model_type == "qwen3") names.emplace_back("mini");
    for (const auto& [name, _] : qwen_shapes(model_type)) names.push_back(name);
  } else if (model_type == "gemma2") {
    names = {"tiny", "2B"};
  } else if (model_type == "gemma3_text") {
    names = {"tiny", "1B"};
  } else if (model_type == "phi3") {
    names = {"tiny", "3.8B", "14B"};
  } else if (model_type == "mixtral") {
    names = {"tiny", "mini", "8x7B"};
  } else if (model_type == "phi") {
    names = {"tiny", "1.3B", "2.7B"};
  } else if (model_type == "falcon") {
    names = {"tiny", "7B"};
  } else {
    throw std::invalid_argument("--model-type '" + model_type + "': expected one of " + model_type_list());
  }
  return names;
}

nlohmann::json from_scratch_config(const std::string& model_type, const std::string& size, int64_t vocab_size) {
  const auto names = from_scratch_sizes(model_type);
  if (std::find(names.begin(), names.end(), size) == names.end())
    throw std::invalid_argument("--model-size '" + size + "' is not a " + model_type + " size: expected one of " +
                                join_keys(names));
  nlohmann::json config;
  if (model_type == "gpt2") {
    config = gpt2_sizes().at(size);
  } else if (model_type == "opt") {
    config = opt_sizes().at(size);
  } else if (model_type.rfind("gemma", 0) == 0) {
    config = gemma_preset(model_type, size).to_json();
  } else if (model_type == "phi3") {
    config = phi3_preset(size).to_json();
  } else if (model_type == "mixtral") {
    config = mixtral_preset(size).to_json();
  } else if (model_type == "phi") {
    config = phi_preset(size).to_json();
  } else if (model_type == "falcon") {
    // Falcon-7B (tiiuae/falcon-7b's config.json: FalconConfig's defaults, multi-query,
    // parallel attention); tiny: the new decoder architecture, 2 key/value groups of 2 heads.
    nlohmann::json j = {{"model_type", "falcon"}};
    if (size == "tiny")
      j.update({{"vocab_size", 97},
                {"hidden_size", 16},
                {"num_hidden_layers", 2},
                {"num_attention_heads", 4},
                {"num_kv_heads", 2},
                {"new_decoder_architecture", true},
                {"ffn_hidden_size", 40},
                {"max_position_embeddings", 64}});
    config = FalconConfig::from_json(j, "falcon preset " + size).to_json();
  } else if (model_type.rfind("qwen", 0) == 0) {
    config = qwen_preset(model_type, size).to_json();
  } else {
    auto llama = llama_preset(size);
    llama.model_type = model_type;  // the family's own config keys (Mistral: no window)
    config = llama.to_json();
  }
  config["model_type"] = model_type;
  if (vocab_size > 0) config["vocab_size"] = vocab_size;
  return config;
}

namespace {

// splitmix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mix.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// 64-bit FNV-1a: a hash of the name that is the same in every process and build.
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// A CPU generator whose whole mt19937 state comes from the 64-bit `key`, as the
// splitmix64 stream from key. createCPUGenerator(key) alone would keep 32 bits of it
// (mt19937's init_genrand), and among the millions of rows of a large model some would
// then share a stream, i.e. start out as identical rows.
at::Generator row_generator(uint64_t key) {
  auto generator = at::detail::createCPUGenerator(key);
  auto* impl = at::check_generator<at::CPUGeneratorImpl>(generator);
  auto data = impl->engine().data();
  for (auto& word : data.state_) word = static_cast<uint32_t>(splitmix64(key++) >> 32);
  data.left_ = 1;  // as after seeding: the first draw regenerates the state
  data.next_ = 0;
  at::mt19937 engine;
  engine.set_data(data);
  impl->set_engine(engine);
  return generator;
}

bool is_bias(const std::string& name) { return name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0; }

}  // namespace

double initial_norm_weight(const std::string& model_type) { return model_type.rfind("gemma", 0) == 0 ? 0.0 : 1.0; }

void init_rows(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed, int64_t first_row,
               at::Tensor out, double norm_weight) {
  const int64_t total_rows = shape.empty() ? 1 : shape[0];
  std::vector<int64_t> row_shape = {out.defined() && out.dim() > 0 ? out.size(0) : -1};
  if (shape.size() >= 2) row_shape.insert(row_shape.end(), shape.begin() + 1, shape.end());
  const int64_t rows = row_shape[0];
  if (!out.defined() || out.scalar_type() != at::kFloat || !out.device().is_cpu() || !out.is_contiguous() ||
      out.sizes() != c10::IntArrayRef(row_shape) || first_row < 0 || first_row + rows > total_rows) {
    std::string expected = "[rows";
    for (size_t d = 1; d < shape.size(); ++d) expected += ", " + std::to_string(shape[d]);
    throw std::invalid_argument("init_rows: parameter '" + name + "' " + shape_text(shape) +
                                ": cannot write from row " + std::to_string(first_row) + " into " +
                                (out.defined() ? shape_text(out.sizes()) + " " + c10::toString(out.scalar_type())
                                               : std::string("an undefined tensor")) +
                                " (expected a contiguous fp32 CPU tensor " + expected + "] within its " +
                                std::to_string(total_rows) + " rows)");
  }
  auto target = out.detach();  // values only, whatever out's autograd state
  if (shape.size() < 2) {
    if (is_bias(name)) {
      target.zero_();
    } else {
      target.fill_(norm_weight);
    }
    return;
  }
  // One stream per row: any split of the rows, made in any order, gives the same values.
  // Seconds to tens of seconds for a large model on one thread (figures:
  // docs/notes/2026-11-28-comments-moved.md), so large tensors split their rows over the
  // rank's intra-op threads.
  const uint64_t name_key = splitmix64(splitmix64(seed) ^ fnv1a(name));
  constexpr int64_t kValuesPerThread = int64_t{1} << 22;  // below this, a thread costs more than it saves
  const int64_t row_numel = std::max<int64_t>(1, target.numel() / std::max<int64_t>(1, rows));
  runtime::parallel_chunks(rows, std::max<int64_t>(1, kValuesPerThread / row_numel), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      target[r].normal_(0.0, 0.02, row_generator(splitmix64(name_key ^ static_cast<uint64_t>(first_row + r))));
  });
}

std::function<void(const std::string&, const std::vector<int64_t>&, int64_t, at::Tensor)> seeded_rows(
    uint64_t seed, const std::string& model_type) {
  const double norm_weight = initial_norm_weight(model_type);
  return [seed, norm_weight](const std::string& name, const std::vector<int64_t>& shape, int64_t first_row,
                             at::Tensor out) { init_rows(name, shape, seed, first_row, out, norm_weight); };
}

void init_from_scratch(CausalLm& lm, uint64_t seed) {
  torch::NoGradGuard no_grad;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : lm.module->named_parameters(true)) {
    const auto& p = item.value();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;  // a tie: made under its first name
    if (p.is_meta())
      throw std::invalid_argument("init_from_scratch: parameter '" + item.key() +
                                  "' is on the meta device (built under nn::DeferredInit); init_rows makes its rows");
    auto target = p.dim() == 0 ? p.detach().view({1}) : p.detach();  // a 0-d parameter is one row
    const bool in_place = p.scalar_type() == at::kFloat && p.is_contiguous() && p.device().is_cpu();
    auto rows = in_place ? target : at::empty(target.sizes(), at::kFloat);
    init_rows(item.key(), p.sizes().vec(), seed, 0, rows, initial_norm_weight(lm.model_type));
    if (!in_place) target.copy_(rows);
  }
}

}  // namespace fsdpp::models
