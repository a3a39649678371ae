// Hugging Face model folders in and out: config.json plus model.safetensors, or shards
// with model.safetensors.index.json. Tensor names are HF's, so the mapping is 1:1.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>

#include "core/models/causal_lm.h"

namespace fsdpp::models {

// Builds the model its config.json describes and fills every parameter from the
// checkpoint, converting fp32/bf16/fp16 to `dtype`. A tied weight may be stored under
// either name (HF stores it once). Names may also lack the base-model prefix
// ("transformer.", "model.") as some original checkpoints do. Tensors already in `dtype`
// are not copied: parameters live in the file's copy-on-write mapping, so a model needs
// its size in memory once, not twice. Throws std::runtime_error naming the folder and
// the tensor when one is missing or has another shape.
CausalLm load_pretrained(const std::filesystem::path& dir, at::ScalarType dtype = at::kFloat);

// Writes config.json and the weights (each tied weight once, under its first name), as
// one model.safetensors or as shards of at most max_shard_bytes plus an index.
void save_pretrained(const CausalLm& lm, const std::filesystem::path& dir,
                     uint64_t max_shard_bytes = uint64_t{5} << 30);

}  // namespace fsdpp::models
