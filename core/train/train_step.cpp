#include "core/train/train_step.h"

#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/kernels/cross_entropy.h"
#include "core/optim/adamw.h"
#include "core/optim/gradients.h"
#include "core/runtime/stopwatch.h"

namespace fsdpp::train {

namespace {

using Clock = runtime::SteadyClock;
using runtime::ms_since;

// Targets that add nothing to the loss (torch's cross_entropy default).
constexpr int64_t kIgnoreIndex = -100;

}  // namespace

at::Tensor summed_cross_entropy(const models::CausalLm& lm, const at::Tensor& inputs, const at::Tensor& targets) {
  const auto logits = lm.logits(inputs);
  const auto rows = logits.reshape({-1, logits.size(-1)});
  const auto classes = targets.reshape({-1});
  // On CUDA one kernel each way instead of fp32 copies of the logits (core/kernels/cross_entropy.h).
  if (kernels::has_fused_cross_entropy(rows)) return kernels::fused_summed_cross_entropy(rows, classes, kIgnoreIndex);
  return torch::nn::functional::cross_entropy(
      rows.to(torch::kFloat), classes,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(kIgnoreIndex));
}

at::Tensor training_loss(const models::CausalLm& lm, const at::Tensor& inputs, const at::Tensor& targets) {
  auto loss = summed_cross_entropy(lm, inputs, targets);
  if (!lm.auxiliary_loss) return loss;
  return loss + lm.auxiliary_loss() * static_cast<double>(targets.numel());
}

TrainStep::TrainStep(comm::Communicator& comm, const models::CausalLm& lm, fsdp::ShardedModel* sharded,
                     torch::optim::Optimizer& optimizer, const TrainStepOptions& options, StepObserver* observer)
    : TrainStep(
          comm, [&lm](const MicroBatch& batch) { return training_loss(lm, batch.inputs, batch.targets); }, sharded,
          optimizer, options, observer) {}

TrainStep::TrainStep(comm::Communicator& comm, LossFn loss, fsdp::ShardedModel* sharded,
                     torch::optim::Optimizer& optimizer, const TrainStepOptions& options, StepObserver* observer)
    : comm_(comm),
      loss_(std::move(loss)),
      sharded_(sharded),
      optimizer_(optimizer),
      options_(options),
      observer_(observer) {
  if (options.rows_per_micro_batch < 1 || options.seq_len < 1 || options.grad_accum_steps < 1)
    throw std::invalid_argument("TrainStep: rows_per_micro_batch, seq_len and grad_accum_steps must be >= 1, got " +
                                std::to_string(options.rows_per_micro_batch) + ", " + std::to_string(options.seq_len) +
                                ", " + std::to_string(options.grad_accum_steps));
  if (sharded == nullptr && comm.size() != 1)
    throw std::invalid_argument("TrainStep: the plain model (no FSDP) trains in one process, not " +
                                std::to_string(comm.size()) + " ranks");
  parameters_ = sharded ? sharded->parameters() : optim::optimizer_parameters(optimizer);
  if (options.loss_scaling) {
    optim::GradScalerOptions scaler_options;
    scaler_options.init_scale = options.init_loss_scale;
    scaler_options.growth_interval = options.loss_scale_growth_interval;
    scaler_.emplace(scaler_options, &comm);
  }
  backward_scale_ = 1.0 / static_cast<double>(options.rows_per_micro_batch * options.seq_len *
                                              (options.world_size_invariant ? 1 : options.grad_accum_steps));
}

int64_t TrainStep::tokens_per_step() const {
  return options_.rows_per_micro_batch * options_.seq_len * options_.grad_accum_steps * comm_.size();
}

void StepRecord::read() {
  if (pending_loss.defined()) loss = optim::host_value(pending_loss);
  if (pending_grad_norm.defined()) grad_norm = optim::host_value(pending_grad_norm);
  pending_loss = pending_grad_norm = at::Tensor();
}

StepRecord TrainStep::run(double lr, const std::function<MicroBatch(int)>& micro_batch, StepReads reads) {
  StepRecord record;
  optim::set_lr(optimizer_, lr);
  std::vector<at::Tensor> chunk_losses;  // this rank's loss sum per micro-batch
  for (int micro = 0; micro < options_.grad_accum_steps; ++micro) {
    auto t = Clock::now();
    const MicroBatch batch = micro_batch(micro);
    record.data_ms += ms_since(t);
    if (sharded_ != nullptr && options_.accumulate_without_sync)
      sharded_->set_requires_gradient_sync(micro == options_.grad_accum_steps - 1);
    t = Clock::now();
    const at::Tensor loss = loss_(batch);
    chunk_losses.push_back(loss.detach());
    record.forward_ms += ms_since(t);
    t = Clock::now();
    auto scaled = loss * backward_scale_;
    (scaler_ ? scaler_->scale(scaled) : scaled).backward();
    record.backward_ms += ms_since(t);
  }
  const auto t = Clock::now();
  if (options_.world_size_invariant) {
    const double chunks = static_cast<double>(comm_.size()) * options_.grad_accum_steps;
    for (const auto& p : parameters_)
      if (p.grad().defined()) p.mutable_grad().div_(chunks);
  }
  if (observer_ != nullptr) observer_->after_backward();
  if (scaler_) scaler_->unscale(parameters_);  // clipping sees the true gradients
  if (observer_ != nullptr) observer_->before_clip();
  record.pending_grad_norm = norm_and_clip();
  if (scaler_) {
    record.optimizer_stepped = scaler_->step(optimizer_, parameters_);  // every rank skips an overflow alike
    scaler_->update();
    record.loss_scale = scaler_->current_scale();
  } else {
    optimizer_.step();
  }
  optim::clear_gradients(optimizer_);
  record.pending_loss = reduce_loss(chunk_losses);
  record.optimizer_ms = ms_since(t);
  if (reads == StepReads::AtEnd) record.read();
  return record;
}

at::Tensor TrainStep::norm_and_clip() {
  const double p = options_.norm_type;
  if (sharded_ != nullptr)
    return options_.grad_clip > 0 ? sharded_->clip_grad_norm_on_device(options_.grad_clip, p)
                                  : sharded_->grad_norm_on_device(p);
  return options_.grad_clip > 0 ? optim::clip_grad_norm_on_device(parameters_, options_.grad_clip, p)
                                : optim::grad_norm_on_device(parameters_, p);
}

// Each micro-batch's loss sum in fp64, reduced over the ranks on the loss's device: in the
// order and the precision the host summed them in before (so the bits are the same).
at::Tensor TrainStep::reduce_loss(const std::vector<at::Tensor>& chunk_losses) {
  std::vector<at::Tensor> sums;  // each micro-batch's loss sum, fp64
  sums.reserve(chunk_losses.size());
  for (const auto& l : chunk_losses) sums.push_back(l.to(at::kDouble).reshape({}));
  at::Tensor loss_sum;
  if (options_.world_size_invariant) {
    // Every chunk's loss sum, folded one by one in chunk order c = micro * world + rank.
    const int world = comm_.size();
    auto mine = at::stack(sums);
    auto all = at::empty({static_cast<int64_t>(world) * options_.grad_accum_steps}, mine.options());
    comm_.all_gather_into(all, mine);
    auto by_rank = all.view({world, options_.grad_accum_steps});
    loss_sum = at::zeros({}, mine.options());
    for (int micro = 0; micro < options_.grad_accum_steps; ++micro)
      for (int r = 0; r < world; ++r) loss_sum = loss_sum + by_rank[r][micro];
  } else {
    loss_sum = at::zeros({}, sums.front().options());
    for (const auto& s : sums) loss_sum = loss_sum + s;
    loss_sum = loss_sum.reshape({1});
    comm_.all_reduce(loss_sum, comm::ReduceOp::Sum);
  }
  return loss_sum.reshape({}) / static_cast<double>(tokens_per_step());
}

}  // namespace fsdpp::train
