// Consolidated export: a sharded checkpoint's model as a Hugging Face folder (config.json,
// generation_config.json and model.safetensors, or model-0000i-of-0000n.safetensors +
// model.safetensors.index.json above `max_shard_bytes`, split as huggingface_hub splits).
// config.json and generation_config.json are those fsdpp train's export writes
// (models::write_export_configs): the train state's model_config (the source config.json)
// with the keys fsdpp computes written over it; its generation_config (the --model folder's
// as the run read it), else the one transformers derives from the token ids.
// The tensors keep HF names: the
// checkpoint's "model/<name>" tensors are already named as the HF architecture names them.
// Streams: one tensor is assembled from its rows (across every rank file) at a time, so
// the whole model is never in memory at once. The result loads with load_pretrained and
// with transformers' from_pretrained.
#pragma once

#include <cstdint>
#include <filesystem>

#include "core/checkpoint/checkpoint_reader.h"
#include "core/io/safetensors.h"

namespace fsdpp::checkpoint {

struct HfExport {
  io::ShardedWrite files;
  std::filesystem::path config_path;
  int64_t tensors = 0;
};

// HF's default shard limit (transformers' save_pretrained max_shard_size "5GB").
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000ULL;

// Throws one line naming the checkpoint when it holds no model tensors or its train state
// has no "model_config" (a checkpoint not written by `fsdpp train`).
HfExport export_hf_folder(const CheckpointReader& reader, const std::filesystem::path& out_dir,
                          uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace fsdpp::checkpoint
