#include "core/models/presets.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "core/io/shape_text.h"
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
  } else if (model_type == "qwen2" || model_type == "qwen3") {
    names = {"tiny"};  // the test shape; Qwen's published sizes are issue 41's item 5
  } else {
    // Gemma's norms start at zero (x * (1 + w)); init_rows starts every norm at one.
    std::string known;
    for (const auto& type : supported_model_types())
      if (type.rfind("gemma", 0) != 0) known += (known.empty() ? "" : ", ") + type;
    throw std::invalid_argument("--model-type '" + model_type + "': expected a family with from-scratch presets (" +
                                known + "); load a Hugging Face folder with --model for the others");
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
  } else {
    auto llama = llama_preset(size);
    llama.model_type = model_type;  // the family's own config keys (Mistral: no window)
    if (model_type == "qwen3") llama.head_dim = 2 * llama.dim_per_head();  // Qwen3's trap: not hidden / heads
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

void init_rows(const std::string& name, const std::vector<int64_t>& shape, uint64_t seed, int64_t first_row,
               at::Tensor out) {
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
      target.fill_(1.0);
    }
    return;
  }
  // One stream per row: any split of the rows, made in any order, gives the same values.
  // About 6 ns a value on one thread (0.8 s for GPT-2 124M, 40 s for Llama 7B), so large
  // tensors split their rows over the rank's intra-op threads.
  const uint64_t name_key = splitmix64(splitmix64(seed) ^ fnv1a(name));
  constexpr int64_t kValuesPerThread = int64_t{1} << 22;  // below this, a thread costs more than it saves
  const int64_t row_numel = std::max<int64_t>(1, target.numel() / std::max<int64_t>(1, rows));
  runtime::parallel_chunks(rows, std::max<int64_t>(1, kValuesPerThread / row_numel), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      target[r].normal_(0.0, 0.02, row_generator(splitmix64(name_key ^ static_cast<uint64_t>(first_row + r))));
  });
}

std::function<void(const std::string&, const std::vector<int64_t>&, int64_t, at::Tensor)> seeded_rows(uint64_t seed) {
  return [seed](const std::string& name, const std::vector<int64_t>& shape, int64_t first_row, at::Tensor out) {
    init_rows(name, shape, seed, first_row, out);
  };
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
    init_rows(item.key(), p.sizes().vec(), seed, 0, rows);
    if (!in_place) target.copy_(rows);
  }
}

}  // namespace fsdpp::models
