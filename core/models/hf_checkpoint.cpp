#include "core/models/hf_checkpoint.h"

#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <unordered_map>

#include "core/io/atomic_file.h"
#include "core/io/hf_config.h"
#include "core/io/safetensors.h"
#include "core/io/shape_text.h"
#include "core/io/yaml_json.h"
#include "core/models/families.h"
#include "core/nn/deferred_init.h"
#include "core/nn/unique_parameters.h"

namespace fsdpp::models {

using io::shape_text;

namespace {

// Names under which `name` may be stored: itself, then without the base-model prefix.
std::vector<std::string> stored_names(const std::string& name) {
  std::vector<std::string> names = {name};
  for (const char* prefix : {"transformer.", "model."})
    if (name.rfind(prefix, 0) == 0) names.push_back(name.substr(std::strlen(prefix)));
  return names;
}

// The name under which `checkpoint` stores the parameter `name`, known in the model also by
// `aliases` (all of its names): the first alias stored as is or without the base-model
// prefix, with shape `shape`. Throws naming the checkpoint file and the tensor.
std::string stored_name(const io::SafetensorsIndex& checkpoint, const std::string& name,
                        const std::vector<std::string>& aliases, c10::IntArrayRef shape,
                        const std::string& model_type) {
  std::string found;
  for (const auto& alias : aliases)
    for (const auto& stored : stored_names(alias))
      if (found.empty() && checkpoint.contains(stored)) found = stored;
  if (found.empty())
    throw std::runtime_error(checkpoint.path().string() + ": no tensor '" + name + "' (expected shape " +
                             shape_text(shape) + " for " + model_type + ")");
  auto info = checkpoint.info(found);
  if (c10::IntArrayRef(info.shape) != shape)
    throw std::runtime_error(checkpoint.path().string() + ": tensor '" + found + "' has shape " +
                             shape_text(info.shape) + ", the config implies " + shape_text(shape));
  return found;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every tensor of `checkpoint` is read by a parameter of `params`, or is one of
// known_unread_tensors(). A parameter stored under two of its names (a tied weight saved
// under both, or with and without the base-model prefix) is read from the first; the other
// copy must hold the same values, or the file describes another model than the one the
// config ties. Throws std::runtime_error naming the file and the tensor, never ignores one:
// a tensor nothing reads is a part of the model that would silently not be computed.
void refuse_unread_tensors(const io::SafetensorsIndex& checkpoint, const std::vector<nn::UniqueParameter>& params,
                           const std::string& model_type) {
  std::unordered_map<std::string, std::string> read_from;  // stored name -> the stored name its parameter reads
  for (const auto& param : params) {
    std::string first;
    for (const auto& alias : param.aliases)
      for (const auto& stored : stored_names(alias)) {
        if (!checkpoint.contains(stored)) continue;
        if (first.empty()) first = stored;
        read_from[stored] = first;
      }
  }
  for (const auto& name : checkpoint.names()) {
    auto it = read_from.find(name);
    if (it != read_from.end()) {
      if (it->second == name) continue;
      auto copy = checkpoint.tensor(name), read = checkpoint.tensor(it->second);
      if (copy.scalar_type() == read.scalar_type() && copy.sizes() == read.sizes() && at::equal(copy, read)) continue;
      throw std::runtime_error(checkpoint.shard_path(name).string() + ": tensor '" + name + "' differs from '" +
                               it->second +
                               "', which the config makes the same parameter (tied or aliased); refusing to pick one");
    }
    bool known = false;
    for (const auto& unread : family_of(model_type, checkpoint.path().string()).unread_tensors)
      known = known || ends_with(name, unread.suffix);
    if (!known)
      throw std::runtime_error(checkpoint.shard_path(name).string() + ": tensor '" + name +
                               "' is read by no parameter of the " + model_type +
                               " model config.json describes (refusing to ignore part of a checkpoint)");
  }
}

}  // namespace

CausalLm load_pretrained(const std::filesystem::path& dir, at::ScalarType dtype) {
  const auto config = io::load_hf_config(dir);
  return load_pretrained(dir, parse_causal_lm_config(config.raw, config.path.string()), dtype);
}

CausalLm load_pretrained(const std::filesystem::path& dir, const CausalLmConfig& config, at::ScalarType dtype) {
  CausalLm lm;
  {
    nn::DeferredInit deferred;  // every parameter is replaced below: never hold random weights
    lm = config.build();
  }
  auto checkpoint = io::load_checkpoint_dir(dir);
  const auto params = nn::unique_parameters(*lm.module);
  torch::NoGradGuard no_grad;
  for (const auto& [name, param_ref, aliases] : params) {
    auto param = param_ref;
    auto stored = checkpoint.tensor(stored_name(checkpoint, name, aliases, param.sizes(), lm.model_type));
    if (stored.scalar_type() == dtype && stored.is_contiguous()) {
      // Zero copy: the parameter's storage is the file's mapped pages (copy-on-write), so
      // loading needs no second copy in memory and pages are read when first used.
      nn::set_data_across_devices(param, stored);
    } else {
      auto converted = at::empty(param.sizes(), at::TensorOptions().dtype(dtype));
      converted.copy_(stored);
      nn::set_data_across_devices(param, converted);
    }
  }
  refuse_unread_tensors(checkpoint, params, lm.model_type);
  lm.module->to(dtype);  // buffers
  return lm;
}

namespace {

// Writes the weights; returns the config.json save_pretrained writes with them.
nlohmann::json save_weights(const CausalLm& lm, const std::filesystem::path& dir, uint64_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  io::NamedTensors tensors;
  for (const auto& [name, param] : nn::unique_named_parameters(*lm.module)) tensors.emplace_back(name, param.detach());
  io::write_sharded_safetensors(dir, tensors, max_shard_bytes);
  return config_with_dtype(lm.config, tensors.empty() ? at::kFloat : tensors.front().second.scalar_type());
}

}  // namespace

nlohmann::json config_with_dtype(nlohmann::json config, at::ScalarType dtype) {
  const char* dtype_name = dtype == at::kBFloat16 ? "bfloat16" : dtype == at::kHalf ? "float16" : "float32";
  // transformers 5 reads "dtype"; earlier versions "torch_dtype". Both, so either loads it.
  config["dtype"] = dtype_name;
  config["torch_dtype"] = dtype_name;
  return config;
}

void save_pretrained(const CausalLm& lm, const std::filesystem::path& dir, uint64_t max_shard_bytes) {
  io::write_file_atomic(dir / "config.json", save_weights(lm, dir, max_shard_bytes).dump(2) + "\n");
}

void save_pretrained(const CausalLm& lm, const std::filesystem::path& dir, const ExportSource& source,
                     uint64_t max_shard_bytes) {
  write_export_configs(dir, save_weights(lm, dir, max_shard_bytes), source);
}

nlohmann::json exported_config(const nlohmann::json& source, const nlohmann::json& written) {
  nlohmann::json merged = source.is_object() ? source : nlohmann::json::object();
  merged.erase("rope_parameters");
  for (const auto& item : written.items()) merged[item.key()] = item.value();
  return merged;
}

nlohmann::json read_generation_config(const std::filesystem::path& dir) {
  const auto path = dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return nullptr;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::invalid_argument(path.string() + ": cannot read");
  auto parsed = io::parse_json_text<nlohmann::json>(text, path.string());
  if (!parsed.is_object()) throw std::invalid_argument(path.string() + ": expected a JSON object");
  return parsed;
}

std::string export_generation_config(const nlohmann::json& source, const nlohmann::json& config) {
  if (source.is_object()) return source.dump(2) + "\n";
  nlohmann::json generation = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(key) && !config[key].is_null()) generation[key] = config[key];
  return generation.dump(2) + "\n";
}

void write_export_configs(const std::filesystem::path& dir, const nlohmann::json& written, const ExportSource& source) {
  const auto config = exported_config(source.config, written);
  io::write_file_atomic(dir / "config.json", config.dump(2) + "\n");
  io::write_file_atomic(dir / "generation_config.json", export_generation_config(source.generation_config, config));
}

struct PretrainedRows::State {
  std::filesystem::path dir;
  std::string model_type;
  io::SafetensorsIndex checkpoint;
  std::unordered_map<std::string, std::vector<std::string>> aliases;  // parameter name -> all names of its tensor
};

PretrainedRows::PretrainedRows(std::shared_ptr<const State> state) : state_(std::move(state)) {}

PretrainedRows PretrainedRows::open(const std::filesystem::path& dir) {
  const auto config = io::load_hf_config(dir);
  return open(dir, parse_causal_lm_config(config.raw, config.path.string()));
}

PretrainedRows PretrainedRows::open(const std::filesystem::path& dir, const CausalLmConfig& config) {
  CausalLm lm;
  {
    nn::DeferredInit deferred;  // only the names and ties are wanted
    lm = config.build();
  }
  auto state = std::make_shared<State>(State{dir, lm.model_type, io::load_checkpoint_dir(dir), {}});
  const auto params = nn::unique_parameters(*lm.module);
  refuse_unread_tensors(state->checkpoint, params, lm.model_type);
  for (const auto& param : params)
    for (const auto& name : param.aliases) state->aliases[name] = param.aliases;
  return PretrainedRows(std::move(state));
}

void PretrainedRows::read(const std::string& name, const std::vector<int64_t>& shape, int64_t first_row,
                          at::Tensor out) const {
  const auto& s = *state_;
  auto known = s.aliases.find(name);
  const auto aliases = known == s.aliases.end() ? std::vector<std::string>{name} : known->second;
  const auto found = stored_name(s.checkpoint, name, aliases, shape, s.model_type);
  const int64_t total_rows = shape.empty() ? 1 : shape[0];
  std::vector<int64_t> row_shape = {out.defined() && out.dim() > 0 ? out.size(0) : -1};
  if (shape.size() >= 2) row_shape.insert(row_shape.end(), shape.begin() + 1, shape.end());
  const int64_t rows = row_shape[0];
  if (!out.defined() || !out.device().is_cpu() || out.sizes() != c10::IntArrayRef(row_shape) || first_row < 0 ||
      first_row + rows > total_rows)
    throw std::invalid_argument(s.dir.string() + ": cannot read rows of '" + name + "' " + shape_text(shape) +
                                " from row " + std::to_string(first_row) + " into " +
                                (out.defined() ? shape_text(out.sizes()) : std::string("an undefined tensor")) +
                                " (expected a CPU tensor of the parameter's row shape within its " +
                                std::to_string(total_rows) + " rows)");
  auto stored = s.checkpoint.tensor(found);  // a view of the mapped file: nothing is read yet
  if (stored.dim() == 0) stored = stored.view({1});
  torch::NoGradGuard no_grad;
  out.copy_(stored.narrow(0, first_row, rows));  // reads only these rows' pages
}

}  // namespace fsdpp::models
