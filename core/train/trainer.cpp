#include "core/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/data/sampler.h"
#include "core/fsdp/activation_checkpointing.h"
#include "core/fsdp/wrap_policy.h"
#include "core/models/hf_checkpoint.h"
#include "core/models/presets.h"
#include "core/nn/deferred_init.h"
#include "core/nn/unique_parameters.h"
#include "core/optim/adamw.h"
#include "core/optim/lr_schedule.h"
#include "core/runtime/device.h"
#include "core/runtime/stopwatch.h"
#include "core/tokenizer/load.h"
#include "core/train/train_checkpoint.h"
#include "core/train/train_logger.h"
#include "core/train/train_step.h"

namespace fsdpp::train {

namespace {

using runtime::ms_since;

// --device cuda: rank r computes on GPU local_rank % GPUs (torchrun's convention), where
// shards are materialised too; data windows are copied there per micro-step.
at::Device rank_device(at::Device device, int local_rank) {
  if (device.is_cuda() && !device.has_index())
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % runtime::cuda_device_count()));
  return device;
}

// The run's FSDP options on `device`. --mixed-precision: torchtitan's default policy,
// compute and all-gather in bf16/fp16, gradients reduced in fp32, fp32 master weights and
// optimizer state. --deterministic: bits independent of the world size too (trainer.h).
fsdp::FsdpOptions rank_fsdp_options(const TrainConfig& c, at::Device device) {
  auto options = c.fsdp;
  if (c.mixed_precision != "fp32") {
    options.mixed_precision.param_dtype = runtime::parse_compute_dtype(c.mixed_precision, "--mixed-precision");
    options.mixed_precision.reduce_dtype = at::kFloat;
  }
  options.cpu_offload = c.cpu_offload;
  if (c.deterministic) options.reduction_order = fsdp::ReductionOrder::WorldSizeInvariant;
  if (device.is_cuda()) options.device = device;
  return options;
}

fsdp::WrapPolicy make_wrap_policy(const std::string& spec, const std::string& block_type) {
  if (spec == "block") return fsdp::wrap_by_module_type({block_type});
  if (spec == "none") return fsdp::wrap_nothing();
  return fsdp::wrap_by_min_params(std::stoll(spec.substr(5)));  // "size:N", checked by validate()
}

// --no-reshard-after-forward, --reshard-after-forward-group-size and --explicit-prefetch on
// the units the wrap policy made.
void apply_unit_controls(fsdp::ShardedModel& sharded, const TrainConfig& c) {
  const auto kept = units_kept_unsharded(sharded, c);
  for (const auto& [name, module] : kept) sharded.set_reshard_after_forward(*module, false);
  if (c.reshard_after_forward_group_size > 0)
    for (const auto& wrapped : sharded.wrapped_modules()) {
      const torch::nn::Module* module = wrapped.second;
      if (std::none_of(kept.begin(), kept.end(), [module](const auto& k) { return k.second == module; }))
        sharded.set_reshard_after_forward(*module, c.reshard_after_forward_group_size);
    }
  if (c.explicit_prefetch == 0) return;
  const auto modules = sharded.wrapped_modules();
  const auto units = static_cast<int64_t>(modules.size());
  for (int64_t i = 0; i < units; ++i) {
    std::vector<const torch::nn::Module*> next, previous;
    for (int64_t j = i + 1; j < std::min(units, i + 1 + c.explicit_prefetch); ++j) next.push_back(modules[j].second);
    for (int64_t j = i - 1; j >= std::max<int64_t>(0, i - c.explicit_prefetch); --j)
      previous.push_back(modules[j].second);
    sharded.set_forward_prefetch(*modules[i].second, next);
    sharded.set_backward_prefetch(*modules[i].second, previous);
  }
}

// Deferred initialisation: the model is built on the meta device and each rank
// materialises only its own rows while it is sharded (from the seed, or read from the
// checkpoint's safetensors), so no rank ever holds the whole model. With
// --sync-module-states, rank 0 loads the folder and broadcasts it unit by unit instead.
// The model's config is the one preflight read and parsed; it is not read again.
models::CausalLm build_model(const TrainConfig& c, const models::CausalLmConfig& config, int rank,
                             fsdp::FsdpOptions& fsdp_options) {
  if (c.sync_module_states) {
    fsdp_options.sync_module_states = true;
    if (rank == 0) {
      if (!c.from_scratch) return models::load_pretrained(c.model_dir, config);
      auto lm = config.build();
      models::init_from_scratch(lm, c.seed);
      return lm;
    }
  } else if (c.from_scratch) {
    fsdp_options.materialize = models::seeded_rows(c.seed, config.model_type);
  } else {
    auto rows = std::make_shared<models::PretrainedRows>(models::PretrainedRows::open(c.model_dir, config));
    fsdp_options.materialize = [rows](const std::string& name, const std::vector<int64_t>& shape, int64_t first_row,
                                      at::Tensor out) { rows->read(name, shape, first_row, out); };
  }
  nn::DeferredInit deferred;
  return config.build();
}

// A tied weight once, as transformers' num_parameters() counts (LibTorch's parameters()
// lists it under each module that holds it).
int64_t parameter_count(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : nn::unique_parameters(module)) count += p.tensor.numel();
  return count;
}

// Whether metrics.jsonl logs a save that committed (METRICS.md: kind "checkpoint" without
// "error"). A run that logged none stopped before its first checkpoint, since a finished
// run always saves at the end. A line cut short by a crash is skipped.
bool logs_committed_checkpoint(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) continue;
    const auto kind = record.find("kind");
    if (kind != record.end() && *kind == "checkpoint" && !record.contains("error")) return true;
  }
  return false;
}

// Where a run starts: from a checkpoint, or at step 0 (appending to the metrics of an
// earlier run that stopped before its first checkpoint when start_over).
struct RunStart {
  std::optional<std::filesystem::path> checkpoint;
  bool start_over = false;
};

// Collective. A run directory is never overwritten. Rerunning the same command (--resume
// auto) continues from the newest complete checkpoint; where the earlier run stopped
// before its first one (found by ci/fault_trials.sh: killed in or before its first save,
// it could not be rerun), it starts over at step 0 and appends to the earlier metrics. A
// run that logged a committed checkpoint and has none left, or --resume never, is refused
// (rank 0 throws).
RunStart find_run_start(comm::Communicator& comm, const TrainConfig& c, const std::filesystem::path& run_dir) {
  RunStart start;
  start.checkpoint = resume_checkpoint(comm, c, run_dir / "checkpoints");
  const auto metrics_path = run_dir / "metrics.jsonl";
  if (comm.rank() == 0 && !start.checkpoint && std::filesystem::exists(metrics_path)) {
    if (c.resume != "auto" || logs_committed_checkpoint(metrics_path))
      throw std::runtime_error(metrics_path.string() +
                               " exists and the run has no complete checkpoint to resume from: choose another "
                               "--experiment-name or --save-dir, or remove that run");
    start.start_over = true;
    std::printf(
        "note: %s logs no committed checkpoint (the run stopped before its first one): starting over at "
        "step 0, appending to it\n",
        metrics_path.string().c_str());
    std::fflush(stdout);
  }
  return start;
}

// Collective: restores the checkpoint `dir` into `parts`; rank 0 says so (and how the
// batches differ from the checkpoint's, if they do). Returns the optimizer steps done.
int64_t resume_from(comm::Communicator& comm, const std::filesystem::path& dir, const TrainCheckpointParts& parts,
                    const TrainConfig& c) {
  const auto restored = restore_train_checkpoint(comm, dir, parts);
  if (comm.rank() == 0) {
    std::printf("resuming from %s: %lld optimizer steps done\n", dir.string().c_str(),
                static_cast<long long>(restored.step));
    const std::string note = batch_change_note(restored.train_state, c, comm.size());
    if (!note.empty()) std::printf("note: %s\n", note.c_str());
    std::fflush(stdout);
  }
  return restored.step;
}

TrainStepOptions step_options(const TrainConfig& c, int64_t seq_len) {
  TrainStepOptions options;
  options.rows_per_micro_batch = c.batch_size;
  options.seq_len = seq_len;
  options.grad_accum_steps = c.grad_accum_steps;
  options.accumulate_without_sync = c.no_sync_accum;
  options.grad_clip = c.grad_clip;
  options.norm_type = c.norm_type;
  options.world_size_invariant = c.deterministic;  // trainer.h
  // fp16's narrow range needs dynamic loss scaling (bf16 has fp32's exponent range).
  options.loss_scaling = c.mixed_precision == "fp16" || c.loss_scaling;
  options.loss_scale_growth_interval = c.loss_scale_growth_interval;
  return options;
}

data::SamplerOptions sampler_options(const TrainConfig& c, const RunInputs& inputs, const comm::Communicator& comm) {
  data::SamplerOptions options;
  options.num_windows = inputs.train_set.num_windows(inputs.seq_len);
  options.batch_per_rank = c.batch_size;
  options.world_size = comm.size();
  options.rank = comm.rank();
  options.grad_accum = c.grad_accum_steps;
  options.shuffle = c.shuffle;
  options.seed = c.seed;
  return options;
}

// --max-steps, or the steps of --num-epochs passes over the training windows.
int64_t total_steps_of(const TrainConfig& c, int64_t train_windows, int64_t global_batch) {
  return c.max_steps > 0 ? c.max_steps
                         : static_cast<int64_t>(std::ceil(c.num_epochs * static_cast<double>(train_windows) /
                                                          static_cast<double>(global_batch)));
}

std::string tokenizer_source(const TrainConfig& c) {
  if (!c.tokenizer.empty()) return c.tokenizer;
  if (c.model_dir.empty()) return "";
  try {  // the model folder's own tokenizer, if it has one
    tokenizer::load_tokenizer(c.model_dir);
    return c.model_dir;
  } catch (const std::exception&) {
    return "";
  }
}

// Collective: rank 0 writes the model as a Hugging Face folder (config.json, safetensors,
// generation_config.json, tokenizer files when known). `source`: the config.json and
// generation config the run started from (a preset's from scratch).
void export_hf(comm::Communicator& comm, fsdp::ShardedModel& sharded, const models::CausalLm& lm,
               const std::string& tokenizer, const std::filesystem::path& dir, const models::ExportSource& source) {
  auto full = sharded.gather_full_parameters();
  if (comm.rank() == 0) {
    auto out = models::build_causal_lm(lm.config, dir.string());
    std::map<std::string, at::Tensor> by_name(full.begin(), full.end());
    torch::NoGradGuard no_grad;
    for (const auto& item : out.module->named_parameters(true)) {
      auto it = by_name.find(item.key());
      if (it != by_name.end()) item.value().copy_(it->second);
    }
    models::save_pretrained(out, dir, source);
    if (!tokenizer.empty()) tokenizer::copy_tokenizer_files(tokenizer, dir);
  }
  comm.barrier();
}

}  // namespace

TrainResult train(comm::Communicator& comm, const TrainConfig& c, const RunInputs& inputs, int local_rank,
                  StepObserver* observer) {
  // Set up once: the model on this rank's device under FSDP, the optimizer, the step, the
  // data order, the checkpoint to continue from.
  if (c.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  torch::manual_seed(c.seed);
  const auto device = rank_device(inputs.device, local_rank);
  runtime::set_current_device(device);
  auto fsdp_options = rank_fsdp_options(c, device);
  auto lm = build_model(c, inputs.model, comm.rank(), fsdp_options);
  fsdp_options.gradients_may_differ_across_ranks = lm.data_dependent_parameters;
  const int64_t parameters = parameter_count(*lm.module);
  const int64_t seq_len = inputs.seq_len;

  TrainResult result;
  result.run_dir = std::filesystem::path(c.save_dir) / c.experiment_name;
  result.hf_dir = result.run_dir / "hf";
  const RunStart start = find_run_start(comm, c, result.run_dir);

  c.validate_for_world(comm.size());
  auto sharded =
      fsdp::ShardedModel::create(lm.module, comm, fsdp_options, make_wrap_policy(c.wrap_policy, lm.block_type));
  apply_unit_controls(*sharded, c);
  if (c.activation_checkpointing)
    fsdp::apply_activation_checkpointing(*lm.module, fsdp::CheckpointPolicy{{lm.block_type}, c.ac_freq});
  auto optimizer = optim::make_adamw(sharded->named_parameters(), c.adamw);
  TrainStep train_step(comm, lm, sharded.get(), *optimizer, step_options(c, seq_len), observer);
  const auto sampling = sampler_options(c, inputs, comm);
  data::DistributedSampler sampler(sampling);
  const TrainCheckpointParts checkpoint_parts{*sharded, *optimizer,          train_step.scaler(),
                                              sampler,  inputs.model_config, inputs.generation_config};
  const int64_t start_step = start.checkpoint ? resume_from(comm, *start.checkpoint, checkpoint_parts, c) : 0;
  const int64_t global_batch = sampler.global_batch();
  const int64_t total_steps = total_steps_of(c, sampling.num_windows, global_batch);
  optim::LrSchedule schedule{c.adamw.lr, c.min_lr, c.warmup_steps, total_steps, c.lr_decay};
  const int64_t tokens_per_step = train_step.tokens_per_step();
  const std::string tokenizer = tokenizer_source(c);

  // The components: metrics and lines (rank 0), evaluation, checkpoints.
  TrainLogger logger(comm, result.run_dir / "metrics.jsonl", c,
                     RunShape{start_step, comm.size(), lm.model_type, parameters, seq_len, global_batch, total_steps,
                              sampling.num_windows},
                     *sharded, device, /*append=*/start.checkpoint.has_value() || start.start_over);
  std::optional<Evaluator> evaluator;
  if (inputs.eval_set)
    evaluator.emplace(comm, lm, *inputs.eval_set, EvalOptions{seq_len, c.batch_size, c.eval_max_windows, c.eval_freq},
                      device, logger);
  if (evaluator && start_step == 0) result.eval_before = evaluator->run(0);
  TrainCheckpointer checkpointer(comm, result.run_dir / "checkpoints", c);

  logger.begin_steps();
  double tokens_per_s_sum = 0;
  for (int64_t step = start_step; step < total_steps; ++step) {
    const auto step_start = runtime::SteadyClock::now();
    const double lr = schedule.at(step);
    sharded->reset_comm_stats();
    const int64_t steps_done = step + 1;
    const bool eval_due = evaluator && evaluator->due(steps_done, total_steps);
    const bool save_due = (c.ckpt_freq > 0 && steps_done % c.ckpt_freq == 0) || steps_done == total_steps;
    // The host reads the step's loss and norm only where they are logged or something else
    // waits for the device anyway; the other steps queue their work and go on.
    const bool read = logger.prints(steps_done) || step == start_step || eval_due || save_due;
    const StepRecord done = train_step.run(
        lr,
        [&](int micro) {
          auto [batch_inputs, targets] = inputs.train_set.windows(sampler.micro_batch(micro), seq_len);
          return MicroBatch{batch_inputs.to(device), targets.to(device)};
        },
        StepReads::Deferred);
    sampler.advance();
    const double step_ms = ms_since(step_start);
    const double tokens_per_s = static_cast<double>(tokens_per_step) / (step_ms / 1000.0);
    if (step > start_step) tokens_per_s_sum += tokens_per_s;
    logger.log_step(StepLog{steps_done, lr, done, step_ms, tokens_per_s, steps_done * tokens_per_step,
                            static_cast<double>(sampler.position()) / static_cast<double>(sampling.num_windows)},
                    *sharded, read);

    if (eval_due) evaluator->run(steps_done);
    if (save_due) checkpointer.save(steps_done, checkpoint_parts);
    logger.log_checkpoints(checkpointer.take_committed());
    if (observer != nullptr)
      observer->after_step(steps_done, [&] {
        logger.flush();
        checkpointer.finish();
        logger.log_checkpoints(checkpointer.take_committed());
      });
  }
  checkpointer.finish();  // the last save commits while nothing else runs
  logger.log_checkpoints(checkpointer.take_committed());
  logger.finish_steps();                    // every step read and logged
  result.first_loss = logger.first_loss();  // this process's first step, also after a resume
  result.last_loss = logger.last_loss();
  result.steps = total_steps;
  result.start_step = start_step;
  if (total_steps - start_step > 1)
    result.mean_tokens_per_s = tokens_per_s_sum / static_cast<double>(total_steps - start_step - 1);
  if (evaluator) result.eval_after = evaluator->run(total_steps);
  export_hf(comm, *sharded, lm, tokenizer, result.hf_dir,
            models::ExportSource{inputs.model_config, inputs.generation_config});
  logger.close(result.hf_dir);
  return result;
}

}  // namespace fsdpp::train
