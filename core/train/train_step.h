// One optimizer step: the only training step in fsdpp. `fsdpp train` runs it once per step
// (trainer.cpp); `fsdpp bench-step` and the benchmark matrix time it
// (harness/bench/step_bench.cpp), so the figures in results/ are for the code training
// runs; the equivalence oracle's sharded side steps through it too
// (harness/equiv/equivalence.cpp; its unsharded reference stays its own).
//
// A step, in torchtitan's train_step order:
//   1. for each of grad_accum_steps micro-batches: forward, the summed next-token
//      cross-entropy in fp32, times backward_scale (times the loss scale), backward; FSDP
//      reduces the gradients (core/fsdp);
//   2. world-size invariant mode: the folded gradient divided once by the number of chunks
//      (world_size x grad_accum_steps; trainer.h says why);
//   3. loss scaling: the gradients unscaled, so that clipping sees the true ones;
//   4. the global gradient norm, clipped to grad_clip when that is > 0;
//   5. the learning rate set, the optimizer step (skipped on every rank alike when the
//      scaler found an overflow), the gradients cleared;
//   6. the logged loss: the mean over every rank's tokens of the step (one all-reduce, or in
//      invariant mode one all-gather folded in chunk order), on the device.
// The loss and the gradient norm stay on the device until the caller reads them
// (StepRecord::read), so a step that is not logged never makes the host wait for the
// device: torchtitan reads its loss on log steps only. What still reads within a step:
// loss scaling (whether to skip the optimizer step, as PyTorch's GradScaler) and the
// world-size-invariant gradient norm (folded on the host).
//
// backward_scale is 1 / (batch_size x seq_len x grad_accum_steps), or without the
// grad_accum_steps factor in invariant mode: with FSDP's averaging over ranks, the gradient
// is that of the logged loss.
//
// Not thread-safe; collective: every rank calls run() the same number of times.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "core/comm/communicator.h"
#include "core/fsdp/sharded_model.h"
#include "core/models/causal_lm.h"
#include "core/optim/grad_scaler.h"
#include "core/train/step_observer.h"

namespace fsdpp::train {

// A micro-batch of one rank: token ids [rows, seq_len], targets the next tokens, on the
// device the model computes on.
struct MicroBatch {
  at::Tensor inputs, targets;
};

struct TrainStepOptions {
  int64_t rows_per_micro_batch = 1;  // batch_size: windows per rank per micro-batch
  int64_t seq_len = 1;
  int grad_accum_steps = 1;
  double grad_clip = 0;               // max global 2-norm; 0: the norm is measured, nothing is clipped
  bool world_size_invariant = false;  // --deterministic's arithmetic (trainer.h)
  // Global norm for clipping and the logged gradient norm: p > 0, or infinity.
  double norm_type = 2;
  // FSDP only: gradients stay unsharded on each rank until the last micro-batch, which
  // reduces them all at once (FSDP2's set_requires_gradient_sync(False) for the others).
  bool accumulate_without_sync = false;
  // Dynamic loss scaling (ShardedGradScaler): always with fp16 parameters.
  bool loss_scaling = false;
  double init_loss_scale = 65536.0;
  int64_t loss_scale_growth_interval = 2000;
};

// What one step did, the same on every rank except the times.
struct StepRecord {
  // Valid once read() has run (TrainStep::run does it unless told StepReads::Deferred).
  double loss = 0;                // mean next-token cross-entropy over every rank's tokens
  double grad_norm = 0;           // global norm (norm_type) before clipping (unscaled)
  bool optimizer_stepped = true;  // false: the scaler skipped an overflowing step
  double loss_scale = 1;  // the scale after this step's update, the next step's (1 without loss scaling; METRICS.md)
  // Host time of each phase: getting the micro-batches, forwards, backwards, and
  // unscale + norm + clip + optimizer + loss reduction. On CUDA, kernels still queued
  // when a phase ends are counted in a later one.
  double data_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  // Until read(): loss and grad_norm as 0-dim fp64 tensors on the device, not yet read.
  at::Tensor pending_loss, pending_grad_norm;

  // Sets loss and grad_norm from the pending tensors (a host sync where they are on a
  // device) and drops them; nothing once they are read. Not collective.
  void read();
};

// Whether TrainStep::run reads the step's loss and gradient norm before it returns.
enum class StepReads {
  AtEnd,     // run() returns them read (one host sync)
  Deferred,  // left on the device in the record; the caller reads them when it logs
};

// Sum of next-token cross-entropy over every target of [rows, seq_len], in fp32 (targets of
// -100 add nothing). CUDA logits take the fused kernel (core/kernels/cross_entropy.h), the
// CPU torch's cross_entropy on an fp32 copy; the two agree to fp32 round-off.
at::Tensor summed_cross_entropy(const models::CausalLm& lm, const at::Tensor& inputs, const at::Tensor& targets);

// What a causal LM's micro-step minimises: summed_cross_entropy, plus the model's auxiliary
// loss (CausalLm::auxiliary_loss, a mixture of experts' load balancing) times the
// micro-batch's token count, so that backward_scale makes each micro-batch count as
// transformers' loss (mean cross-entropy + coef x aux), averaged over the step's micro-batches.
at::Tensor training_loss(const models::CausalLm& lm, const at::Tensor& inputs, const at::Tensor& targets);

// What a micro-step minimises: the loss of one micro-batch, a scalar tensor that the step
// multiplies by backward_scale before backward. A causal LM's is summed_cross_entropy (so
// that backward_scale makes it the mean over the step's tokens); a loss that is already a
// mean over its micro-batch goes with rows_per_micro_batch = seq_len = 1.
using LossFn = std::function<at::Tensor(const MicroBatch&)>;

class TrainStep {
 public:
  // `sharded` is the model under FSDP, or null for the plain model in one process (its
  // parameters are the optimizer's). The references must outlive the step; so must
  // `observer` (if not null), called inside each step (step_observer.h).
  TrainStep(comm::Communicator& comm, const models::CausalLm& lm, fsdp::ShardedModel* sharded,
            torch::optim::Optimizer& optimizer, const TrainStepOptions& options, StepObserver* observer = nullptr);
  // Any model: `loss` computes a micro-batch's loss (the model is the one `sharded` wraps,
  // or the optimizer's).
  TrainStep(comm::Communicator& comm, LossFn loss, fsdp::ShardedModel* sharded, torch::optim::Optimizer& optimizer,
            const TrainStepOptions& options, StepObserver* observer = nullptr);

  // One optimizer step at learning rate `lr` over the micro-batches micro_batch(0) ..
  // micro_batch(grad_accum_steps - 1). Throws what the model, FSDP or the communicator throw.
  StepRecord run(double lr, const std::function<MicroBatch(int micro)>& micro_batch,
                 StepReads reads = StepReads::AtEnd);

  // The loss scaler (null without loss scaling); checkpoints save and restore its state.
  optim::ShardedGradScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }

  // The global tokens one step trains on: rows x seq_len x grad_accum_steps x world size.
  int64_t tokens_per_step() const;

 private:
  at::Tensor norm_and_clip();
  at::Tensor reduce_loss(const std::vector<at::Tensor>& chunk_losses);

  comm::Communicator& comm_;
  LossFn loss_;
  fsdp::ShardedModel* sharded_;
  torch::optim::Optimizer& optimizer_;
  TrainStepOptions options_;
  StepObserver* observer_;
  std::vector<at::Tensor> parameters_;  // FSDP's local shards, or the optimizer's (a tie once)
  std::optional<optim::ShardedGradScaler> scaler_;
  double backward_scale_ = 1;
};

}  // namespace fsdpp::train
