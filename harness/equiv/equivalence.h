// The equivalence runner: trains a model sharded on N ranks and, on rank 0, the same
// model unsharded in one process with plain LibTorch (no fsdpp code in its training
// path), from the same initial weights and data, and compares them step by step: loss,
// gradient norm, and at chosen steps every full parameter and gradient.
//
// Data: micro-batch i of step s is model.batch(s, i). With N ranks and K accumulation
// steps the global batch is i = 0..N*K-1; rank r's micro-step k uses i = k*N + r. The
// reference trains on all of them at once (concatenated), or, in deterministic mode,
// accumulates them one by one in rank order and divides by N, which is what the sharded
// run's rank-order reduce-scatter computes bit for bit.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/fsdp/sharded_model.h"
#include "core/models/tiny_transformer.h"

namespace fsdpp::harness {

struct TrainBatch {
  torch::Tensor input, target;
};

struct EquivModel {
  std::string name;
  std::function<std::shared_ptr<torch::nn::Module>(uint64_t seed)> build;    // same seed, same weights
  std::function<torch::Tensor(torch::nn::Module&, const TrainBatch&)> loss;  // mean over the batch
  std::function<TrainBatch(int64_t step, int64_t index)> batch;
  std::function<TrainBatch(const std::vector<TrainBatch>&)> concat;
  fsdp::WrapPolicy wrap;
};

EquivModel toy_mlp_case();
EquivModel tiny_transformer_case(const models::TinyTransformerConfig& config = {});
EquivModel equiv_case(const std::string& name);  // "toy_mlp" or "tiny_transformer"

struct EquivConfig {
  fsdp::FsdpOptions fsdp;
  int steps = 10;
  int grad_accum = 1;
  bool accumulate_without_sync = false;  // set_requires_gradient_sync(false) until the last micro-step
  double clip_max_norm = 0;              // 0: no clipping (the norm is still compared)
  double norm_type = 2;
  bool deterministic = false;  // compare parameters bit for bit
  // AdamW divides by sqrt(v) + eps: for a gradient element near zero its update moves
  // by up to lr / eps times any rounding difference in that element (sharded and
  // unsharded runs sum in different orders). lr 1e-3 / eps 1e-6 (a BERT-style fine-tune
  // setting) keeps that amplification (1e3 x ~1e-9) below the fp32 tolerance; with
  // PyTorch's eps 1e-8 and lr 1e-2 one element in ~10^4 lands outside it. Deterministic
  // mode is bitwise at any setting.
  double lr = 1e-3;
  double adam_eps = 1e-6;
  double weight_decay = 0.1;
  uint64_t seed = 1;
  // Where both runs compute (the model and batches are moved there; the reference is the
  // unsharded model on the same device). Records are compared on the CPU.
  at::Device device = at::kCPU;
  std::vector<int> compare_full_at;  // steps whose grads and params are compared; default first and last
  // Dynamic loss scaling (fp16). The sharded run steps through ShardedGradScaler; the
  // reference applies GradScaler's rules by hand: loss * scale, gradients * (1/scale) in
  // fp32, no optimizer step where a gradient is not finite, scale * backoff there and
  // * growth after growth_interval clean steps. Power-of-two scales keep both bitwise.
  struct LossScaling {
    bool enabled = false;
    double init_scale = 65536.0;
    int64_t growth_interval = 2000;
    // Injected overflow: after backward at this step, one element of this rank's first
    // non-empty gradient shard becomes inf (the reference treats that step as overflowed).
    int overflow_step = -1;
    int overflow_rank = 0;
  } loss_scaling;
};

struct StepRecord {
  int step = 0;
  double ref_loss = 0, loss = 0, ref_grad_norm = 0, grad_norm = 0;
  // Under loss scaling: the scale this step's loss was multiplied by, and whether the
  // optimizer stepped (an overflow skips it). Without it: 1 and true.
  double ref_loss_scale = 1, loss_scale = 1;
  bool ref_stepped = true, stepped = true;
  bool ok = false;
};

struct TensorRecord {
  std::string name;
  std::string kind;  // "param" (after the step) or "grad" (before clipping)
  int step = 0;
  double max_abs_error = 0, max_rel_error = 0;
  bool bitwise_equal = false;
  bool ok = false;
};

struct EquivReport {
  std::string model;
  std::string strategy;
  int world_size = 1;
  bool deterministic = false;
  std::vector<StepRecord> steps;
  std::vector<TensorRecord> tensors;
  std::vector<std::string> problems;  // e.g. a gradient defined on one side only

  bool ok() const;
  std::string table() const;
  nlohmann::json to_json() const;  // format "fsdpp.equiv", version 1
};

// Sets one element of this rank's first non-empty gradient to inf (an injected fp16
// overflow). Throws std::logic_error if no gradient holds an element.
void inject_overflow(const std::vector<torch::Tensor>& params);

// Collective over `comm`. The returned report holds the comparison on rank 0; on other
// ranks it holds only their own sharded-run numbers.
EquivReport run_equivalence(comm::Communicator& comm, const EquivModel& model, const EquivConfig& config);

}  // namespace fsdpp::harness
