// Reading a sharded checkpoint (CHECKPOINT.md) with any number of ranks: each rank asks
// for the rows it needs of each tensor, and only the rank files holding those rows are
// opened (memory-mapped through core/io/safetensors.h).
//
// Verification: open() reads and validates index.json and checks that every file it
// lists exists with the listed size. A file's sha256 is checked before its first byte is
// used (so each rank hashes only the files it reads); verify_all() checks every file.
//
// Errors: std::runtime_error with one line naming the file and the problem, e.g.
//   "checkpoint file DIR/rank-00001.safetensors: sha256 is 1f.., index.json says 9a.. (file corrupt)"
// A rank file whose safetensors header is invalid fails with the safetensors reader's
// message ("safetensors file PATH: ...").
//
// Copies share state; const methods are safe to call from several threads.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_index.h"

namespace fsdpp::checkpoint {

class CheckpointReader {
 public:
  static CheckpointReader open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const;
  const CheckpointIndex& index() const;
  const nlohmann::json& train_state() const { return index().train_state; }
  bool contains(const std::string& name) const;
  // Throws naming the checkpoint when there is no such tensor.
  const TensorEntry& tensor(const std::string& name) const;

  // Copies rows [first_row, first_row + n) of `name` into `out`, where n = out.size(0)
  // (1 for a 0-d `out`) and out has n rows of the tensor's row shape (any shape with that
  // many elements) and its dtype. `out` may live on any device and be non-contiguous.
  // Bitwise: the bytes saved are the bytes read.
  void read_rows(const std::string& name, int64_t first_row, at::Tensor out) const;
  // The whole tensor, in fresh CPU memory.
  at::Tensor read(const std::string& name) const;

  // Hashes every file not hashed yet and validates its safetensors header against the
  // index; throws on the first problem.
  void verify_all() const;

 private:
  struct State;
  explicit CheckpointReader(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

inline CheckpointReader load_checkpoint(const std::filesystem::path& dir) { return CheckpointReader::open(dir); }

}  // namespace fsdpp::checkpoint
