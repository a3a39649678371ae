#include "core/models/presets.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/models/gpt2.h"
#include "core/models/llama.h"
#include "core/models/opt.h"

namespace fsdpp::models {

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
      {"tiny", gpt2(2, 64, 4, 256).to_json()},     {"mini", gpt2(4, 128, 4, 512).to_json()},
      {"124M", gpt2(12, 768, 12, 1024).to_json()}, {"355M", gpt2(24, 1024, 16, 1024).to_json()},
      {"774M", gpt2(36, 1280, 20, 1024).to_json()}, {"1.5B", gpt2(48, 1600, 25, 1024).to_json()}};
  return sizes;
}

const std::map<std::string, nlohmann::json>& opt_sizes() {
  // OPT-350M projects 512-wide embeddings and uses post-LayerNorm blocks, as released.
  static const std::map<std::string, nlohmann::json> sizes = {
      {"tiny", opt(2, 64, 4, 256, 64, true).to_json()},        {"mini", opt(4, 128, 4, 512, 128, true).to_json()},
      {"125M", opt(12, 768, 12, 2048, 768, true).to_json()},   {"350M", opt(24, 1024, 16, 2048, 512, false).to_json()},
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
  } else {
    throw std::invalid_argument("--model-type '" + model_type + "': expected gpt2, opt, llama or mistral");
  }
  return names;
}

nlohmann::json from_scratch_config(const std::string& model_type, const std::string& size, int64_t vocab_size) {
  const auto names = from_scratch_sizes(model_type);
  if (std::find(names.begin(), names.end(), size) == names.end())
    throw std::invalid_argument("--model-size '" + size + "' is not a " + model_type + " size: expected one of " +
                                join_keys(names));
  nlohmann::json config = model_type == "gpt2"  ? gpt2_sizes().at(size)
                          : model_type == "opt" ? opt_sizes().at(size)
                                                : llama_preset(size).to_json();
  config["model_type"] = model_type;
  if (vocab_size > 0) config["vocab_size"] = vocab_size;
  return config;
}

void init_from_scratch(CausalLm& lm, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  for (const auto& item : lm.module->named_parameters(true)) {
    auto p = item.value();
    const auto& name = item.key();
    if (p.dim() >= 2) {
      p.normal_(0.0, 0.02, generator);
    } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      p.zero_();
    } else {
      p.fill_(1.0);
    }
  }
}

}  // namespace fsdpp::models
