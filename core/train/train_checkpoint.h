// The trainer's checkpoints: what `fsdpp train` saves every --ckpt-freq steps and at the
// end (<run>/checkpoints/step-NNNNNN, format core/checkpoint/CHECKPOINT.md), and how a
// rerun of the same command continues from the newest complete one.
//
// Train state (index.json "train_state", format "fsdpp.train-state" version 1): the
// optimizer steps done, the sampler's data position, the grad scaler's state, the model
// config and its sha256, the source's generation config (for checkpoint export) and the
// run's config. The LR schedule is a function of the step, so the
// step restores it. Each rank's CPU generator state is the tensor "rng/cpu" (row r: rank
// r), restored when the world size is the same (the models draw no random numbers while
// training; data order comes from the sampler's own generator).
#pragma once

#include <nlohmann/json.hpp>
#include <torch/optim/adamw.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "core/checkpoint/async_saver.h"
#include "core/comm/communicator.h"
#include "core/data/sampler.h"
#include "core/fsdp/sharded_model.h"
#include "core/optim/grad_scaler.h"
#include "core/train/train_config.h"

namespace fsdpp::train {

// What a checkpoint holds and restores.
struct TrainCheckpointParts {
  fsdp::ShardedModel& model;
  torch::optim::AdamW& optimizer;
  optim::ShardedGradScaler* scaler;  // null without loss scaling
  data::DistributedSampler& sampler;
  const nlohmann::json& model_config;
  const nlohmann::json& generation_config;  // the source folder's; null: none
};

// Collective. The checkpoint to resume from: --resume auto picks the newest complete one
// in `checkpoints_dir` (rank 0 checks every file's sha256 and prints one line for each
// newer torn or corrupt save it skips); never gives none; anything else is that folder.
std::optional<std::filesystem::path> resume_checkpoint(comm::Communicator& comm, const TrainConfig& config,
                                                       const std::filesystem::path& checkpoints_dir);

struct RestoredTrainState {
  int64_t step = 0;            // optimizer steps done
  nlohmann::json train_state;  // the checkpoint's, as saved
};

// Collective: restores shards, AdamW state, sampler position, scaler and RNG. Throws one
// line naming the folder when it holds another model (config hash) or another
// train-state format; shape mismatches are named per tensor.
RestoredTrainState restore_train_checkpoint(comm::Communicator& comm, const std::filesystem::path& dir,
                                            const TrainCheckpointParts& parts);

// "" when a run of `config` on `world_size` ranks continues the checkpoint's batches as
// the uninterrupted run would; else a one-line note saying why not: another global
// batch (windows per step), or, with --deterministic, another --batch-size (its chunks,
// and so its bits, differ). Such a run still continues from the same data position.
std::string batch_change_note(const nlohmann::json& train_state, const TrainConfig& config, int world_size);

// Saves the trainer's checkpoints into checkpoints_dir/step-NNNNNN, keeping the newest
// config.keep_last complete ones: synchronously, or with config.async_checkpoint in the
// background (core/checkpoint/async_saver.h: the loop waits only for a host copy of the
// shards and for the previous save).
class TrainCheckpointer {
 public:
  // Collective when config.async_checkpoint (creates the saver's communicator).
  TrainCheckpointer(comm::Communicator& comm, std::filesystem::path checkpoints_dir, const TrainConfig& config);
  ~TrainCheckpointer();

  // Collective: saves after `steps_done` optimizer steps. Synchronous: returns once
  // committed. Asynchronous: waits for the previous save (throwing its failure), then
  // returns once the content is staged.
  void save(int64_t steps_done, const TrainCheckpointParts& parts);

  // Never blocks: the saves that finished since the last call, as metrics.jsonl records
  // ({"kind": "checkpoint", ...}, core/train/METRICS.md; a failed asynchronous save has
  // "error", and the next save() or finish() throws it).
  std::vector<nlohmann::json> take_committed();

  // Collective: waits for the pending save; throws its failure on every rank.
  void finish();

 private:
  comm::Communicator& comm_;
  std::filesystem::path checkpoints_dir_;
  const TrainConfig& config_;
  std::unique_ptr<checkpoint::AsyncCheckpointSaver> async_;  // null: synchronous
  void record(const checkpoint::FinishedSave& finished);
  std::vector<nlohmann::json> committed_;
  int64_t pending_step_ = 0;       // the asynchronous save in flight (or last started)
  double pending_blocked_ms_ = 0;  // how long save() held the loop for it
};

}  // namespace fsdpp::train
