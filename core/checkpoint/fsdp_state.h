// A ShardedModel's parameters and its AdamW state as checkpoint tensors, and back. The
// names are "model/<parameter>" and "optim/<parameter>/exp_avg" (also "exp_avg_sq",
// and "max_exp_avg_sq" with amsgrad); AdamW's per-parameter step counts go into the
// index's "optimizer" object: {"type": "adamw", "step": {"<parameter>": N, ...}}.
#pragma once

#include <torch/optim/adamw.h>

#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/checkpoint_writer.h"
#include "core/fsdp/sharded_model.h"

namespace fsdpp::checkpoint {

// This rank's part of a save: the rows of every parameter shard it holds and their AdamW
// state (optimizer may be null). Replicas (NO_SHARD, hybrid's replicate dimension) split
// their identical rows, so each row is written once and the writing is spread evenly.
// Views, no copies: save before the next optimizer step changes them.
CheckpointContent sharded_state(fsdp::ShardedModel& model, const torch::optim::AdamW* optimizer);

// Loads every parameter's rows for this rank's shards, and AdamW's state for them
// (creating entries the optimizer does not have yet, dropping those the checkpoint lacks),
// from a checkpoint saved with any world size and strategy. Not collective: each rank
// reads only its rows. Call between steps (no unit unsharded). Strict: every parameter
// must be in the checkpoint with its shape and dtype, and the checkpoint must hold no
// tensor the model lacks; these are checked before anything is changed. On a later error
// (a corrupt file) the model and optimizer are partly restored: do not train on.
void restore_sharded_state(const CheckpointReader& reader, fsdp::ShardedModel& model, torch::optim::AdamW* optimizer);

}  // namespace fsdpp::checkpoint
