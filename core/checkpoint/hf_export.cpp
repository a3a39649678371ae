#include "core/checkpoint/hf_export.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "core/models/causal_lm.h"
#include "core/models/hf_checkpoint.h"
#include "core/nn/deferred_init.h"

namespace fsdpp::checkpoint {

namespace {
constexpr const char* kModelPrefix = "model/";
}

HfExport export_hf_folder(const CheckpointReader& reader, const std::filesystem::path& out_dir,
                          uint64_t max_shard_bytes) {
  const auto& state = reader.train_state();
  if (!state.is_object() || !state.contains("model_config") || !state["model_config"].is_object())
    throw std::runtime_error(
        "checkpoint " + reader.dir().string() +
        ": train_state has no model_config (not written by fsdpp train), cannot write config.json");
  // The model model_config describes, built without weights before anything is written: a
  // config fsdpp cannot build is refused with nothing on disk.
  const auto& model_config = state["model_config"];
  models::CausalLm lm;
  {
    nn::DeferredInit deferred;
    lm = models::build_causal_lm(model_config, reader.dir().string() + " train_state model_config");
  }
  const nlohmann::json generation = state.contains("generation_config") ? state["generation_config"] : nullptr;
  if (!generation.is_null() && !generation.is_object())
    throw std::runtime_error("checkpoint " + reader.dir().string() +
                             ": train_state generation_config is neither an object nor null");
  io::StreamedTensors tensors;
  for (const auto& [name, entry] : reader.index().tensors) {
    if (name.rfind(kModelPrefix, 0) != 0) continue;
    io::StreamedTensor t;
    t.name = name.substr(std::string(kModelPrefix).size());
    t.shape = entry.shape;
    t.dtype = entry.dtype;
    t.produce = [&reader, name = name] { return reader.read(name); };
    tensors.push_back(std::move(t));
  }
  if (tensors.empty())
    throw std::runtime_error("checkpoint " + reader.dir().string() + " holds no model tensors (\"model/...\")");
  HfExport result;
  std::filesystem::create_directories(out_dir);
  result.files = io::write_sharded_safetensors_streamed(out_dir, tensors, max_shard_bytes);
  // config.json and generation_config.json as fsdpp train's export writes them: the model's
  // own config over the source's, and the source folder's generation config as the run read
  // it (a checkpoint written before train_state held one: derived).
  models::write_export_configs(out_dir, models::config_with_dtype(lm.config, tensors.front().dtype),
                               models::ExportSource{model_config, generation});
  result.config_path = out_dir / "config.json";
  result.tensors = static_cast<int64_t>(tensors.size());
  return result;
}

}  // namespace fsdpp::checkpoint
