#include "core/models/hf_checkpoint.h"

#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "core/io/atomic_file.h"
#include "core/io/hf_config.h"
#include "core/io/safetensors.h"

namespace fsdpp::models {

namespace {

std::string shape_text(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Names under which `name` may be stored: itself, then without the base-model prefix.
std::vector<std::string> stored_names(const std::string& name) {
  std::vector<std::string> names = {name};
  for (const char* prefix : {"transformer.", "model."})
    if (name.rfind(prefix, 0) == 0) names.push_back(name.substr(std::strlen(prefix)));
  return names;
}

}  // namespace

CausalLm load_pretrained(const std::filesystem::path& dir, at::ScalarType dtype) {
  auto config = io::load_hf_config(dir);
  auto lm = build_causal_lm(config.raw, config.path.string());
  auto checkpoint = io::load_checkpoint_dir(dir);
  torch::NoGradGuard no_grad;
  // Every parameter object once; a tie is satisfied by any of its names.
  std::unordered_map<const c10::TensorImpl*, std::vector<std::string>> names_of;
  std::vector<std::pair<std::string, at::Tensor>> unique;
  for (const auto& item : lm.module->named_parameters(true)) {
    auto* impl = item.value().unsafeGetTensorImpl();
    if (names_of[impl].empty()) unique.emplace_back(item.key(), item.value());
    names_of[impl].push_back(item.key());
  }
  for (auto& [name, param] : unique) {
    std::string found;
    for (const auto& alias : names_of[param.unsafeGetTensorImpl()])
      for (const auto& stored : stored_names(alias))
        if (found.empty() && checkpoint.contains(stored)) found = stored;
    if (found.empty())
      throw std::runtime_error(checkpoint.path().string() + ": no tensor '" + name + "' (expected shape " +
                               shape_text(param.sizes()) + " for " + lm.model_type + ")");
    auto info = checkpoint.info(found);
    if (c10::IntArrayRef(info.shape) != param.sizes())
      throw std::runtime_error(checkpoint.path().string() + ": tensor '" + found + "' has shape " +
                               shape_text(info.shape) + ", the config implies " + shape_text(param.sizes()));
    auto stored = checkpoint.tensor(found);
    if (stored.scalar_type() == dtype && stored.is_contiguous()) {
      // Zero copy: the parameter's storage is the file's mapped pages (copy-on-write), so
      // loading needs no second copy in memory and pages are read when first used.
      param.set_data(stored);
    } else {
      param.set_data(at::empty(param.sizes(), param.options().dtype(dtype)));
      param.copy_(stored);
    }
  }
  lm.module->to(dtype);  // buffers and anything not loaded above
  return lm;
}

void save_pretrained(const CausalLm& lm, const std::filesystem::path& dir, uint64_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  io::NamedTensors tensors;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : lm.module->named_parameters(true))
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) tensors.emplace_back(item.key(), item.value().detach());
  io::write_sharded_safetensors(dir, tensors, max_shard_bytes);
  auto config = lm.config;
  config["torch_dtype"] = tensors.empty() ? "float32" : (tensors.front().second.scalar_type() == at::kBFloat16 ? "bfloat16"
                                                          : tensors.front().second.scalar_type() == at::kHalf ? "float16"
                                                                                                              : "float32");
  io::write_file_atomic(dir / "config.json", config.dump(2) + "\n");
}

}  // namespace fsdpp::models
