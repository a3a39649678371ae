// Held-out evaluation while training: the model's mean next-token cross-entropy over the
// eval set's first windows, before training, every eval_freq steps and at the end, logged
// by rank 0 as a metrics.jsonl "eval" record (core/train/METRICS.md) and an "eval step N"
// line. An evaluation longer than EvalOptions::progress_after_s shows its progress on rank
// 0's stderr.
//
// Contract
// - Collective: every rank calls run() at the same steps (due() answers alike on every
//   rank). Rank r scores windows r, r + N, r + 2N, ...; every rank runs the same number of
//   forward passes (a rank out of windows scores window 0 and discards it), so FSDP's
//   collectives stay in step; one all-reduce sums the losses.
// - No gradients are recorded; the model and the data are not changed.
// - Errors: what the model, FSDP, the communicator or the logger throw.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "core/comm/communicator.h"
#include "core/data/token_dataset.h"
#include "core/models/causal_lm.h"
#include "core/train/train_logger.h"

namespace fsdpp::train {

struct EvalScore {
  double loss = 0;        // mean next-token cross-entropy
  double perplexity = 0;  // exp(loss)
  int64_t tokens = 0;
};

struct EvalOptions {
  int64_t seq_len = 1;
  int64_t batch_size = 1;   // windows per rank per forward pass
  int64_t max_windows = 0;  // the first windows scored; 0: all
  int64_t eval_freq = 0;    // evaluate every eval_freq steps as well; 0: only before and after
  // Rank 0 shows an evaluation's progress on stderr (runtime::ProgressLine: in place on a
  // terminal, else a line per tenth) once it has run this long; a shorter one stays silent.
  double progress_after_s = 5;
};

class Evaluator {
 public:
  // The references must outlive the evaluator; `device` is where the model computes.
  Evaluator(comm::Communicator& comm, const models::CausalLm& lm, const data::TokenDataset& dataset,
            const EvalOptions& options, at::Device device, TrainLogger& logger);

  // Whether the run evaluates after `steps_done` optimizer steps inside the loop: every
  // eval_freq steps, except after the last (the caller evaluates at the end anyway).
  bool due(int64_t steps_done, int64_t total_steps) const;

  // Scores the model, logs the score as taken after `steps_done` optimizer steps (0: before
  // training), and returns it (the same on every rank).
  EvalScore run(int64_t steps_done);

 private:
  EvalScore score();

  comm::Communicator& comm_;
  const models::CausalLm& lm_;
  const data::TokenDataset& dataset_;
  EvalOptions options_;
  at::Device device_;
  TrainLogger& logger_;
};

}  // namespace fsdpp::train
