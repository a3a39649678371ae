// index.json of a checkpoint (format "fsdpp.checkpoint", version 2; CHECKPOINT.md): which
// rows of every tensor each rank file holds, every file's size and sha256, the writers'
// mesh and the caller's opaque state, and the sha256 of that content itself. Values only:
// no I/O except parse/dump. Version 1 (no index_sha256) is still read.
//
// Errors: parse() throws std::runtime_error "checkpoint index PATH: PROBLEM" for anything
// the spec does not allow (unknown format or version, missing or ill-typed fields, content
// that does not match index_sha256, pieces that do not tile a tensor's rows, files the
// index does not list).
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fsdpp::checkpoint {

inline constexpr const char* kFormatName = "fsdpp.checkpoint";
inline constexpr int kFormatVersion = 2;  // written; 1 and 2 are read
inline constexpr const char* kIndexFileName = "index.json";

// How the writers were laid out (informational: any layout loads into any other).
struct CheckpointMesh {
  std::string strategy;      // fsdp::to_string(strategy), or "" when not an FSDP model
  int shard_group_size = 1;  // ranks a parameter is sharded across
  int replicas = 1;          // copies of each shard (NO_SHARD, hybrid's replicate dimension)
};

struct CheckpointFile {
  uint64_t bytes = 0;
  std::string sha256;  // lower-case hex
  int rank = 0;        // the rank that wrote it
};

// Rows [begin, end) of a tensor, stored under the tensor's name in `file`.
struct TensorPiece {
  std::string file;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t rows() const { return end - begin; }
};

struct TensorEntry {
  std::vector<int64_t> shape;  // global shape; [] for a 0-d tensor (one row)
  at::ScalarType dtype = at::kFloat;
  std::vector<TensorPiece> pieces;  // sorted by begin, tiling [0, dim0()) exactly
  int64_t dim0() const { return shape.empty() ? 1 : shape[0]; }
  int64_t row_numel() const;
};

struct CheckpointIndex {
  int world_size = 1;
  CheckpointMesh mesh;
  std::map<std::string, CheckpointFile> files;            // by file name (bare, in the checkpoint folder)
  std::map<std::string, TensorEntry> tensors;             // by tensor name
  nlohmann::json optimizer = nlohmann::json::object();    // e.g. AdamW step counts
  nlohmann::json train_state = nlohmann::json::object();  // the trainer's, opaque

  nlohmann::json to_json() const;  // version kFormatVersion, index_sha256 included
  // Parses and validates `root` (read from `path`, which only names it in errors).
  static CheckpointIndex from_json(const nlohmann::json& root, const std::filesystem::path& path);
  static CheckpointIndex read(const std::filesystem::path& path);
};

// Shape of `rows` rows of a tensor of `shape` as stored in a rank file: [rows, d1, ...];
// a 0-d tensor's one row is stored as a 0-d tensor.
std::vector<int64_t> piece_shape(const std::vector<int64_t>& shape, int64_t rows);

// Safetensors dtype names ("F32", "BF16", ...), as stored in the index.
std::string dtype_name(at::ScalarType dtype);
at::ScalarType dtype_from_name(const std::string& name);  // throws std::invalid_argument

std::string shape_string(const std::vector<int64_t>& shape);  // "[768, 2304]"

// "rank-00003.safetensors"
std::string rank_file_name(int rank);

}  // namespace fsdpp::checkpoint
