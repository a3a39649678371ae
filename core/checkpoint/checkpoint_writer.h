// Saving a sharded checkpoint (CHECKPOINT.md): every rank writes the rows it holds into
// its own rank file, rank 0 writes index.json last and renames the folder into place.
//
// Crash safety: everything is written into "<dir>.tmp-<hex>" and fsynced; the rename to
// `dir` (then an fsync of the parent) is the commit. A crash at any earlier point leaves
// only the temporary folder, which readers never take for a checkpoint. An existing `dir`
// (the same step saved again) is replaced atomically where the file system can swap two
// folders (renameat2 RENAME_EXCHANGE), else removed just before the rename.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_index.h"
#include "core/comm/communicator.h"

namespace fsdpp::checkpoint {

// Rows [first_row, first_row + rows.size(0)) of tensor `name` (global `shape`), as held
// by this rank; a 0-d tensor is one row (rows: 0-d, or 1-D of 1 or 0 elements). `rows`
// may be any device, any strides: it is copied to the file, never modified.
struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  int64_t first_row = 0;
  at::Tensor rows;
};

// What one rank contributes.
struct CheckpointContent {
  std::vector<CheckpointTensor> tensors;
  // Merged across ranks into the index's "optimizer" object: objects are merged key by
  // key, and every other value must be the same on every rank that has it.
  nlohmann::json optimizer = nlohmann::json::object();
  CheckpointMesh mesh;  // rank 0's goes into the index
};

// Points of a save, for tests that kill the process there (SIGKILL: a crash).
enum class SavePoint {
  Started,          // every rank: the temporary folder exists, its rank file is not written
  RankFileWritten,  // every rank: its rank file is written and fsynced
  AllFilesWritten,  // rank 0: every rank's file is written, index.json is not
  IndexWritten,     // rank 0: index.json written and fsynced, folder not yet renamed
  Committed,        // rank 0: renamed into place; older checkpoints not yet pruned
  Pruning,          // rank 0: an older checkpoint renamed aside for removal, its files not yet removed
};

struct SaveOptions {
  // After committing, remove older complete checkpoints (folders "step-<N>" beside `dir`)
  // beyond the newest `keep_last`; 0 keeps everything. The new checkpoint always stays.
  int keep_last = 0;
  std::function<void(SavePoint)> on_point;  // test hook; called where named above
};

struct SavedCheckpoint {
  std::filesystem::path dir;
  std::vector<std::filesystem::path> removed;  // pruned by keep_last (rank 0 only)
  std::vector<std::string> warnings;           // removals that failed (the save stands)
};

// Collective over `world`: every rank calls it with the same `dir`. Each row of every
// tensor must be passed by exactly one rank (replicas pass disjoint parts or nothing);
// ranks may pass a tensor with zero rows. `train_state` (a JSON object, rank 0's is used)
// is stored verbatim. Returns on every rank once the checkpoint is committed; throws the
// same one-line error on every rank if any rank failed (the temporary folder is removed).
// The collectives wait for the slowest writer: the communicator's timeout must cover it.
SavedCheckpoint save_checkpoint(comm::Communicator& world, const std::filesystem::path& dir,
                                const CheckpointContent& content, const nlohmann::json& train_state,
                                const SaveOptions& options = {});

// The same checkpoint written by one process on behalf of ranks.size() ranks (ranks[r] is
// rank r's content): for tests and offline tools. Same files, same commit protocol.
SavedCheckpoint write_checkpoint(const std::filesystem::path& dir, const std::vector<CheckpointContent>& ranks,
                                 const nlohmann::json& train_state, const SaveOptions& options = {});

}  // namespace fsdpp::checkpoint
