// safetensors files (https://huggingface.co/docs/safetensors): one file, or a Hugging Face
// sharded checkpoint (model-0000i-of-0000n.safetensors + model.safetensors.index.json).
// What we read and write, and what we reject: core/io/SAFETENSORS.md.
//
// Errors: every call throws std::runtime_error whose one-line message names the file (and
// the tensor, where there is one) and the problem.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fsdpp::io {

// One entry of a safetensors header.
struct TensorInfo {
  std::string name;
  std::string dtype;           // as in the header: "F32", "BF16", "I64", ...
  std::vector<int64_t> shape;  // [] for a 0-d tensor
  uint64_t begin = 0;          // data_offsets[0], relative to the first byte after the header
  uint64_t end = 0;            // data_offsets[1], one past the last byte
  uint64_t byte_size() const { return end - begin; }
};

// Tensors to write, in file order. Names must be unique.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// A validated, memory-mapped safetensors file. open() checks the whole header against the
// file (see SAFETENSORS.md, "What the reader rejects"), so later calls fail only for names
// that are not in the file or dtypes LibTorch cannot hold.
//
// Copies share the mapping; the mapping lives until the last SafetensorsFile and the last
// view tensor are gone. Const methods are safe to call from several threads.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const;
  std::vector<std::string> names() const;  // in data offset order; ties (empty tensors) in header order
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const;  // "__metadata__", or empty
  uint64_t data_bytes() const;                                 // size of the byte buffer after the header

  // CPU tensor over the mapped bytes, no copy: pages are read from disk when touched and
  // are the page cache's, not this process's heap. The mapping is copy-on-write, so an
  // in-place op on the view changes this process's copy of those pages, never the file.
  // A tensor whose bytes are not aligned to its element size (possible only in files
  // written without HF's dtype ordering) is returned as an aligned copy instead.
  at::Tensor tensor(const std::string& name) const;
  // The same values in freshly allocated memory that does not keep the mapping alive.
  at::Tensor copy_tensor(const std::string& name) const;

 private:
  struct State;
  explicit SafetensorsFile(std::shared_ptr<const State> state);
  std::shared_ptr<const State> state_;
};

// Writes `tensors` as one safetensors file: header (padded with spaces to a multiple of 8
// bytes, as HF's writer does) then each tensor's bytes, row-major and little-endian, in the
// given order with no gaps. `metadata` becomes "__metadata__" (omitted when empty).
// Tensors may be on any device and non-contiguous; one at a time is copied to contiguous
// CPU memory while writing. Atomic: temp file beside `path`, fsync, rename, fsync dir.
void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor to write whose values are produced only when the writer reaches it, so a file
// can be streamed tensor by tensor without holding them all (e.g. an export from a sharded
// checkpoint). `produce` must return a tensor of exactly `shape` and `dtype`.
struct StreamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  std::function<at::Tensor()> produce;
};
using StreamedTensors = std::vector<StreamedTensor>;

// write_safetensors over streamed tensors: at most one produced tensor is alive at a time.
void write_safetensors_streamed(const std::filesystem::path& path, const StreamedTensors& tensors,
                                const std::map<std::string, std::string>& metadata = {});

// A checkpoint folder as HF writes it: either model.safetensors, or shards listed in
// model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {name: file}}).
// Shards are opened (mapped and validated) on first use of one of their tensors. Thread-safe.
class SafetensorsIndex {
 public:
  // `path` is an index json file, or a folder holding model.safetensors.index.json. Every
  // shard the index names must exist (checked here; shards are validated when opened).
  static SafetensorsIndex open(const std::filesystem::path& path);
  // A single file seen as a one-shard checkpoint.
  static SafetensorsIndex from_file(const std::filesystem::path& safetensors_path);

  const std::filesystem::path& path() const;  // the index json, or the single file
  std::vector<std::string> names() const;     // sorted
  bool contains(const std::string& name) const;
  std::filesystem::path shard_path(const std::string& name) const;
  std::vector<std::filesystem::path> shard_paths() const;  // distinct, sorted
  std::optional<uint64_t> total_size() const;              // index "metadata.total_size", if given
  TensorInfo info(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;       // view, as SafetensorsFile::tensor
  at::Tensor copy_tensor(const std::string& name) const;  // as SafetensorsFile::copy_tensor

 private:
  struct State;
  explicit SafetensorsIndex(std::shared_ptr<State> state);
  const SafetensorsFile& shard_for(const std::string& name) const;
  std::shared_ptr<State> state_;
};

// Opens the checkpoint in `dir`: model.safetensors or model.safetensors.index.json. Throws
// naming `dir` when it has neither, or both (they would disagree about which is current).
SafetensorsIndex load_checkpoint_dir(const std::filesystem::path& dir);

// What write_sharded_safetensors wrote.
struct ShardedWrite {
  std::vector<std::filesystem::path> shard_paths;   // in order
  std::optional<std::filesystem::path> index_path;  // absent when everything fit in one file
  uint64_t total_size = 0;                          // tensor bytes, headers excluded (as HF)
};

// Writes `tensors` into `dir` (created if missing) split the way huggingface_hub's
// split_torch_state_dict_into_shards splits: a shard is closed when the next tensor would
// take it past `max_shard_bytes`; a tensor larger than that gets a shard of its own. Shards
// keep the input order. n > 1 shards are model-0000i-of-0000n.safetensors plus
// model.safetensors.index.json, written last; one shard is model.safetensors and no index
// (HF's save_pretrained does the same). Each file is written atomically; afterwards, stale
// checkpoint files of the other layout or of another shard count are removed from `dir`.
// Each shard's "__metadata__" is `metadata` (transformers' loader expects "format": "pt").
ShardedWrite write_sharded_safetensors(const std::filesystem::path& dir, const NamedTensors& tensors,
                                       uint64_t max_shard_bytes,
                                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
ShardedWrite write_sharded_safetensors_streamed(const std::filesystem::path& dir, const StreamedTensors& tensors,
                                                uint64_t max_shard_bytes,
                                                const std::map<std::string, std::string>& metadata = {
                                                    {"format", "pt"}});

}  // namespace fsdpp::io
