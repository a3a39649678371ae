// Everything `fsdpp train` can be told, with the defaults a user of torchrun + FSDP
// scripts would expect. Each field's flag, help, parsing and JSON key are its entry in
// train_options.cpp (the one table the CLI, --config files and to_json read); validate()
// rejects contradictions before any rank touches data.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/fsdp/sharded_model.h"
#include "core/optim/adamw.h"
#include "core/optim/lr_schedule.h"

namespace fsdpp::train {

struct TrainConfig {
  // Model: an HF folder, or a from-scratch preset.
  std::string model_dir;
  bool from_scratch = false;
  std::string model_type = "gpt2";
  std::string model_size;
  int64_t vocab_size = 0;  // from scratch: overrides the preset's (0: keep)
  std::string tokenizer;   // copied into the exported folder (default: the model folder's)

  // Data.
  std::string data, eval_data;  // TokenDataset specs
  int64_t seq_len = 0;          // 0: the model's positions
  int64_t batch_size = 8;       // windows per rank per micro-step
  int grad_accum_steps = 1;
  // FSDP2's set_requires_gradient_sync(False) on all but the last micro-step: gradients
  // accumulate unsharded on each rank and are reduced once per step (more memory, fewer
  // reductions).
  bool no_sync_accum = false;
  bool shuffle = true;
  int64_t eval_max_windows = 0;  // 0: the whole eval set

  // Optimisation.
  optim::AdamWSettings adamw{3e-4, 0.9, 0.999, 1e-8, 0.0};
  double min_lr = 0;
  int64_t warmup_steps = 0;
  optim::LrDecay lr_decay = optim::LrDecay::Cosine;
  int64_t max_steps = 0;  // exactly one of max_steps / num_epochs
  double num_epochs = 0;
  double grad_clip = 0;  // 0: off (the norm is still measured and logged)
  double norm_type = 2;  // the global norm clipped and logged: p > 0, or infinity

  // Parallelism and precision.
  fsdp::FsdpOptions fsdp;
  std::string wrap_policy = "block";  // block | size:N | none
  std::string mixed_precision = "fp32";
  bool activation_checkpointing = false;
  int ac_freq = 1;  // checkpoint every k-th block (torchtitan's ac_freq)
  bool cpu_offload = false;
  // FSDP2's per-unit controls, on the wrapped units in module order (the root excluded; a
  // negative index counts from the end, -1: the last unit, whose backward comes first).
  // reshard_after_forward=False for these units: unsharded from their forward to their
  // backward, one all-gather fewer per step each.
  std::vector<int64_t> no_reshard_after_forward;
  // FSDP2's reshard_after_forward=K (ZeRO++'s hpZ) for every other wrapped unit: after its
  // forward a unit keeps 1/K of its gathered parameters, and its backward all-gather runs
  // over K consecutive ranks of the shard group. 0: reshard fully (true).
  int reshard_after_forward_group_size = 0;
  // set_modules_to_forward_prefetch / _backward_prefetch: each unit issues the all-gathers of
  // the next N units in forward and of the previous N in backward. 0: implicit prefetch.
  int explicit_prefetch = 0;
  bool sync_module_states = false;  // rank 0 builds/loads, broadcasts (else: each rank its rows)
  bool deterministic = false;
  // Where training runs: "cpu", "cuda" (rank r uses GPU local_rank % GPUs) or "cuda:N".
  std::string device = "cpu";

  // Output.
  std::string save_dir = "runs";
  std::string experiment_name = "run";
  int64_t ckpt_freq = 0;          // sharded checkpoint every N steps (0: only at the end)
  int keep_last = 2;              // complete checkpoints kept (0: all)
  bool async_checkpoint = false;  // write checkpoints in the background (core/checkpoint/async_saver.h)
  // "auto": continue from the newest complete checkpoint in <run>/checkpoints if there is
  // one; "never": a fresh run (an existing run is an error); else a checkpoint folder.
  std::string resume = "auto";
  bool loss_scaling = false;                  // dynamic loss scaling even without fp16 (always with fp16)
  int64_t loss_scale_growth_interval = 2000;  // overflow-free steps before the scale doubles
  int64_t log_freq = 10;
  int64_t eval_freq = 0;  // 0: before training and at the end only
  uint64_t seed = 1234;

  // Throws std::invalid_argument naming the flag (as on the command line) and what was
  // expected. Data-dependent checks (dataset size, vocabulary, positions) happen in train().
  void validate() const;
  // What depends on the world size: --reshard-after-forward-group-size against the shard
  // group that `world_size` ranks make with this strategy. Throws std::invalid_argument
  // naming the flag.
  void validate_for_world(int world_size) const;
  // Every option by its key (train_options.h), as the run record and train state keep it.
  nlohmann::json to_json() const;
};

// The wrapped modules (name, module) --no-reshard-after-forward selects, in its order. Throws
// std::invalid_argument naming the flag for an index past the units the wrap policy made.
std::vector<std::pair<std::string, const torch::nn::Module*>> units_kept_unsharded(const fsdp::ShardedModel& sharded,
                                                                                   const TrainConfig& config);

}  // namespace fsdpp::train
