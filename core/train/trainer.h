// The training loop behind `fsdpp train`: one rank's part of FSDP training of a causal
// LM on a token dataset, with the sampler's global-batch order, AdamW, LR schedule,
// clipping, periodic evaluation, metrics, and a Hugging Face export at the end.
//
// Loss: each optimizer step consumes G = batch_size x world_size x grad_accum_steps
// windows of seq_len targets (core/data/sampler.h). Each rank backpropagates
// sum(cross-entropy of its tokens) / (batch_size x seq_len x grad_accum_steps); FSDP's
// gradient reduction averages over ranks, so the gradient is that of the mean over all
// G x seq_len target tokens, and that mean is the logged loss (one all-reduce).
//
// --deterministic also makes the bits independent of the world size (what lets a
// checkpoint continue bitwise on another number of ranks, given the same batch_size):
// FSDP runs in ReductionOrder::WorldSizeInvariant (core/fsdp/sharded_model.h). Each
// micro-step's chunk of batch_size windows is backpropagated with the scale
// 1/(batch_size x seq_len) whatever the world size and grad_accum_steps; the chunks'
// gradients are folded in global chunk order and divided once by the number of chunks
// (world_size x grad_accum_steps); the logged loss folds the chunks' loss sums in chunk
// order (one all-gather) before dividing by the tokens; the gradient norm is folded
// from per-row sums of squares in global row order. Every rank runs its kernels on one
// intra-op thread (reductions inside kernels may depend on the thread count: the CLI
// sets --threads 1).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "core/comm/communicator.h"
#include "core/train/evaluator.h"
#include "core/train/run_inputs.h"
#include "core/train/step_observer.h"
#include "core/train/train_config.h"

namespace fsdpp::train {

struct TrainResult {
  int64_t steps = 0;       // the run's total (--max-steps or the epochs' steps)
  int64_t start_step = 0;  // steps done before this process started (a resumed run's checkpoint)
  // The losses of the first and last steps this process ran (steps start_step+1 and
  // steps); both 0 when it ran none (it resumed a finished run).
  double first_loss = 0, last_loss = 0;
  std::optional<EvalScore> eval_before, eval_after;
  double mean_tokens_per_s = 0;   // steps after the first
  std::filesystem::path run_dir;  // <save_dir>/<experiment_name>
  std::filesystem::path hf_dir;   // <run_dir>/hf
};

// Collective: every rank calls it with the same config and the inputs preflight(config)
// resolved in its process (run_inputs.h; `config` may differ from the one resolved only in
// fsdp.hybrid_shard_size). Set up once, then one TrainStep (train_step.h) per step, with
// the components: Evaluator (evaluator.h), TrainLogger (train_logger.h: rank 0 writes
// <run_dir>/metrics.jsonl, format core/train/METRICS.md, and prints a log line every
// log_freq steps, and a progress bar when attached to a terminal) and TrainCheckpointer
// (train_checkpoint.h). Rank 0 writes the HF folder at the end. Throws
// std::invalid_argument / std::runtime_error naming the flag or file at fault (an existing
// run directory, a checkpoint of another model ...).
// `local_rank` (the rank on this node) picks the GPU for --device cuda. `observer` (if not
// null) is called in and after every step (step_observer.h).
TrainResult train(comm::Communicator& comm, const TrainConfig& config, const RunInputs& inputs, int local_rank = 0,
                  StepObserver* observer = nullptr);

}  // namespace fsdpp::train
