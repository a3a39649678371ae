// Hugging Face model folders in and out: config.json plus model.safetensors, or shards
// with model.safetensors.index.json. Tensor names are HF's, so the mapping is 1:1.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/models/causal_lm.h"

namespace fsdpp::models {

// Builds the model its config.json describes (under nn::DeferredInit: no random weights
// are held) and fills every parameter from the checkpoint, converting fp32/bf16/fp16 to
// `dtype`. A tied weight may be stored under either name (HF stores it once). Names may also lack the base-model prefix
// ("transformer.", "model.") as some original checkpoints do. Tensors already in `dtype`
// are not copied: parameters live in the file's copy-on-write mapping, so a model needs
// its size in memory once, not twice. Throws std::runtime_error naming the folder and
// the tensor when one is missing or has another shape, and naming the file and the tensor
// when the checkpoint holds one that no parameter reads (the buffers transformers
// recomputes, GPT-2's attn.bias and rotary_emb.inv_freq, excepted) or a second copy of a
// tied weight that differs from the first.
CausalLm load_pretrained(const std::filesystem::path& dir, at::ScalarType dtype = at::kFloat);
// The same, with the folder's config.json already read and parsed by the caller (it is not
// read again).
CausalLm load_pretrained(const std::filesystem::path& dir, const CausalLmConfig& config,
                         at::ScalarType dtype = at::kFloat);

// Writes config.json and the weights (each tied weight once, under its first name), as
// one model.safetensors or as shards of at most max_shard_bytes plus an index.
void save_pretrained(const CausalLm& lm, const std::filesystem::path& dir,
                     uint64_t max_shard_bytes = uint64_t{5} << 30);

// Where an exported model came from: the config.json it was built from (a from-scratch
// preset's, or a Hugging Face folder's as read) and that folder's generation_config.json
// (read_generation_config; null: none).
struct ExportSource {
  nlohmann::json config;
  nlohmann::json generation_config;
};

// The folder's generation_config.json, parsed; null when it has none. Throws
// std::invalid_argument naming the file when it is not a JSON object.
nlohmann::json read_generation_config(const std::filesystem::path& dir);

// save_pretrained for an export (fsdpp train's hf/, fsdpp checkpoint export): the weights,
// then config.json written once, as exported_config(source.config, the model's config with
// the weights' dtype), and generation_config.json (export_generation_config).
void save_pretrained(const CausalLm& lm, const std::filesystem::path& dir, const ExportSource& source,
                     uint64_t max_shard_bytes = uint64_t{5} << 30);

// A model's config.json as save_pretrained writes it: `config` with the weights' dtype as
// "dtype" (transformers 5) and "torch_dtype" (earlier versions).
nlohmann::json config_with_dtype(nlohmann::json config, at::ScalarType dtype);

// An export's config.json: the keys fsdpp writes (`written`: the family's own and the dtype)
// over the source's, so that what fsdpp neither computes nor changes (token ids, dropout,
// initializer_range, ...) is kept, as transformers' save_pretrained keeps a loaded config.
// The source's rope_parameters gives way: fsdpp writes the same settings as rope_theta and
// rope_scaling, which transformers 4 and 5 both read.
nlohmann::json exported_config(const nlohmann::json& source, const nlohmann::json& written);

// An export's generation_config.json: the source folder's (`source`, an object) when it
// had one, else (null) what transformers' GenerationConfig.from_model_config derives from
// `config` (its bos/eos/pad token ids, "_from_model_config": true).
std::string export_generation_config(const nlohmann::json& source, const nlohmann::json& config);

// Writes an export's config.json (exported_config) and generation_config.json into `dir`,
// each once.
void write_export_configs(const std::filesystem::path& dir, const nlohmann::json& written, const ExportSource& source);

// The parameters of an HF folder, read row range by row range without loading the model: the
// same names, aliases (tied weights under either name; names without the "transformer."/"model."
// prefix) and dtype conversion rules as load_pretrained. Only the requested rows' bytes of the
// mapped files are touched. Copies share the mapping, which lives as long as the last copy.
// Thread-compatible: const calls may run concurrently.
class PretrainedRows {
 public:
  // config.json + model.safetensors, or an index + shards. Builds the model once under
  // nn::DeferredInit to learn its parameter names and ties (one part in memory at a time).
  // Refuses a checkpoint with a tensor no parameter reads, as load_pretrained does.
  static PretrainedRows open(const std::filesystem::path& dir);
  // The same, with the folder's config.json already read and parsed by the caller (it is
  // not read again).
  static PretrainedRows open(const std::filesystem::path& dir, const CausalLmConfig& config);
  // Rows [first_row, first_row + out.size(0)) of the model parameter `name` (as in named_parameters
  // of the built model, e.g. "transformer.h.0.attn.c_attn.weight"), converted to out's dtype. out:
  // a CPU tensor [rows, shape[1:]...]; a 0-d or 1-d parameter counts its elements as rows. Throws
  // std::runtime_error naming the folder and the tensor when missing or shaped differently than
  // `shape`, std::invalid_argument when out or the rows do not fit `shape`.
  void read(const std::string& name, const std::vector<int64_t>& shape, int64_t first_row, at::Tensor out) const;

 private:
  struct State;
  explicit PretrainedRows(std::shared_ptr<const State> state);
  std::shared_ptr<const State> state_;
};

}  // namespace fsdpp::models
