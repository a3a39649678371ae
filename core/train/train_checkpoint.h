// The trainer's checkpoints: what `fsdpp train` saves every --ckpt-freq steps and at the
// end (<run>/checkpoints/step-NNNNNN, format core/checkpoint/CHECKPOINT.md), and how a
// rerun of the same command continues from the newest complete one.
//
// Train state (index.json "train_state", format "fsdpp.train-state" version 1): the
// optimizer steps done, the sampler's data position, the grad scaler's state, the model
// config's sha256 and the run's config. The LR schedule is a function of the step, so the
// step restores it. Each rank's CPU generator state is the tensor "rng/cpu" (row r: rank
// r), restored when the world size is the same (the models draw no random numbers while
// training; data order comes from the sampler's own generator).
#pragma once

#include <torch/optim/adamw.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>

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
};

// Collective. The checkpoint to resume from: --resume auto picks the newest complete one
// in `checkpoints_dir` (rank 0 checks every file's sha256 and prints one line for each
// newer torn or corrupt save it skips); never gives none; anything else is that folder.
std::optional<std::filesystem::path> resume_checkpoint(comm::Communicator& comm, const TrainConfig& config,
                                                       const std::filesystem::path& checkpoints_dir);

// Collective: restores shards, AdamW state, sampler position, scaler and RNG; returns the
// optimizer steps done. Throws one line naming the folder when it holds another model
// (config hash) or another train-state format; shape mismatches are named per tensor.
int64_t restore_train_checkpoint(comm::Communicator& comm, const std::filesystem::path& dir,
                                 const TrainCheckpointParts& parts);

// Collective: saves after `steps_done` optimizer steps into
// checkpoints_dir/step-NNNNNN, keeping the newest config.keep_last complete ones.
void save_train_checkpoint(comm::Communicator& comm, const std::filesystem::path& checkpoints_dir,
                           int64_t steps_done, const TrainCheckpointParts& parts, const TrainConfig& config);

}  // namespace fsdpp::train
