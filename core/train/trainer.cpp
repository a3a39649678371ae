#include "core/train/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/data/sampler.h"
#include "core/data/token_dataset.h"
#include "core/fsdp/activation_checkpointing.h"
#include "core/fsdp/wrap_policy.h"
#include "core/io/hf_config.h"
#include "core/models/hf_checkpoint.h"
#include "core/models/presets.h"
#include "core/nn/deferred_init.h"
#include "core/optim/grad_scaler.h"
#include "core/optim/gradients.h"
#include "core/runtime/capabilities.h"
#include "core/runtime/device.h"
#include "core/runtime/stopwatch.h"
#include "core/tokenizer/load.h"
#include "core/train/metrics_log.h"
#include "core/train/train_checkpoint.h"
#include "core/train/train_step.h"

namespace fsdpp::train {

namespace {

using Clock = runtime::SteadyClock;
using runtime::ms_since;

int64_t peak_rss_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// Deferred initialisation: the model is built on the meta device and each rank
// materialises only its own rows while it is sharded (from the seed, or read from the
// checkpoint's safetensors), so no rank ever holds the whole model. With
// --sync-module-states, rank 0 loads the folder and broadcasts it unit by unit instead.
models::CausalLm build_model(const TrainConfig& c, const nlohmann::json& config, int rank,
                             fsdp::FsdpOptions& fsdp_options) {
  const std::string source = c.from_scratch ? "--model-size " + c.model_size : c.model_dir;
  if (c.sync_module_states) {
    fsdp_options.sync_module_states = true;
    if (rank == 0) {
      if (!c.from_scratch) return models::load_pretrained(c.model_dir);
      auto lm = models::build_causal_lm(config, source);
      models::init_from_scratch(lm, c.seed);
      return lm;
    }
  } else if (c.from_scratch) {
    fsdp_options.materialize = models::seeded_rows(c.seed);
  } else {
    auto rows = std::make_shared<models::PretrainedRows>(models::PretrainedRows::open(c.model_dir));
    fsdp_options.materialize = [rows](const std::string& name, const std::vector<int64_t>& shape, int64_t first_row,
                                      at::Tensor out) { rows->read(name, shape, first_row, out); };
  }
  nn::DeferredInit deferred;
  return models::build_causal_lm(config, source);
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();  // unique tensors
  return count;
}

fsdp::WrapPolicy make_wrap_policy(const std::string& spec, const std::string& block_type) {
  if (spec == "block") return fsdp::wrap_by_module_type({block_type});
  if (spec == "none") return fsdp::wrap_nothing();
  return fsdp::wrap_by_min_params(std::stoll(spec.substr(5)));  // "size:N", checked by validate()
}

data::TokenDataset open_dataset(const std::string& spec, const std::string& flag, int64_t seq_len, int64_t vocab) {
  auto dataset = data::TokenDataset::open(spec);
  dataset.require_window(seq_len, flag + " " + spec);
  if (dataset.max_token() >= vocab)
    throw std::runtime_error(flag + " " + spec + ": token id " + std::to_string(dataset.max_token()) +
                             " is outside the model's vocabulary of " + std::to_string(vocab));
  return dataset;
}

// Held-out loss over the first `max_windows` windows (0: all). Rank r scores windows
// r, r + N, r + 2N, ...; every rank runs the same number of forward passes (a rank out
// of windows scores window 0 and discards it) so FSDP's collectives stay in step.
EvalScore evaluate(comm::Communicator& comm, const models::CausalLm& lm, const data::TokenDataset& dataset,
                   int64_t seq_len, int64_t batch_size, int64_t max_windows, at::Device device) {
  torch::NoGradGuard no_grad;
  const int64_t n = comm.size(), rank = comm.rank();
  int64_t windows = dataset.num_windows(seq_len);
  if (max_windows > 0) windows = std::min(windows, max_windows);
  const int64_t per_rank = (windows + n - 1) / n;
  const int64_t batches = (per_rank + batch_size - 1) / batch_size;
  double loss_sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<int64_t> rows;
    for (int64_t j = 0; j < batch_size; ++j) {
      int64_t w = rank + n * (b * batch_size + j);
      if (w < windows) rows.push_back(w);
    }
    const bool idle = rows.empty();
    if (idle) rows.push_back(0);
    auto [inputs, targets] = dataset.windows(rows, seq_len);
    double s = summed_cross_entropy(lm, inputs.to(device), targets.to(device)).item<double>();
    if (!idle) loss_sum += s;
  }
  auto total = torch::tensor({loss_sum}, torch::kDouble);
  comm.all_reduce(total, comm::ReduceOp::Sum);
  EvalScore score;
  score.tokens = windows * seq_len;
  score.loss = total.item<double>() / static_cast<double>(score.tokens);
  score.perplexity = std::exp(score.loss);
  return score;
}

// Collective: rank 0 writes the model as a Hugging Face folder (config.json, safetensors,
// tokenizer files when known).
void export_hf(comm::Communicator& comm, fsdp::ShardedModel& sharded, const models::CausalLm& lm,
               const std::string& tokenizer, const std::filesystem::path& dir) {
  auto full = sharded.gather_full_parameters();
  if (comm.rank() == 0) {
    auto out = models::build_causal_lm(lm.config, dir.string());
    std::map<std::string, at::Tensor> by_name(full.begin(), full.end());
    torch::NoGradGuard no_grad;
    for (const auto& item : out.module->named_parameters(true)) {
      auto it = by_name.find(item.key());
      if (it != by_name.end()) item.value().copy_(it->second);
    }
    models::save_pretrained(out, dir);
    if (!tokenizer.empty()) tokenizer::copy_tokenizer_files(tokenizer, dir);
  }
  comm.barrier();
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

nlohmann::json comm_bytes(const fsdp::ShardedModel& sharded) {
  nlohmann::json out;
  for (auto kind : {comm::CollectiveKind::AllGather, comm::CollectiveKind::ReduceScatter, comm::CollectiveKind::AllReduce,
                    comm::CollectiveKind::AllToAll})
    out[comm::to_string(kind)] = sharded.comm_stats(kind).bytes_sent;
  return out;
}

}  // namespace

Preflight preflight(const TrainConfig& c) {
  c.validate();
  runtime::parse_device(c.device, "--device");  // a CUDA device where there is none: one line before any rank
  Preflight p;
  p.model_config = c.from_scratch ? models::from_scratch_config(c.model_type, c.model_size, c.vocab_size)
                                  : io::load_hf_config(c.model_dir).raw;
  const std::string source = c.from_scratch ? "--model-size " + c.model_size : c.model_dir + "/config.json";
  auto limits = models::causal_lm_limits(p.model_config, source);
  if (c.mixed_precision == "fp16" && !runtime::cpu_has_fp16_kernels())
    throw std::invalid_argument(
        "--mixed-precision fp16: this LibTorch has no fp16 CPU kernels (matmul, LayerNorm); use bf16 on CPU");
  p.seq_len = c.seq_len > 0 ? c.seq_len : limits.max_positions;
  if (p.seq_len > limits.max_positions)
    throw std::invalid_argument("--seq-len " + std::to_string(p.seq_len) + " is above the model's " +
                                std::to_string(limits.max_positions) + " positions");
  open_dataset(c.data, "--data", p.seq_len, limits.vocab_size);
  if (!c.eval_data.empty()) open_dataset(c.eval_data, "--eval-data", p.seq_len, limits.vocab_size);
  return p;
}

TrainResult train(comm::Communicator& comm, const TrainConfig& c, int local_rank, const TrainHooks& hooks) {
  const auto checked = preflight(c);
  const bool lead = comm.rank() == 0;
  const int world = comm.size();
  if (c.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  torch::manual_seed(c.seed);

  // --mixed-precision: torchtitan's default policy, compute and all-gather in bf16/fp16,
  // gradients reduced in fp32, fp32 master weights and optimizer state.
  auto fsdp_options = c.fsdp;
  if (c.mixed_precision != "fp32") {
    fsdp_options.mixed_precision.param_dtype = runtime::parse_compute_dtype(c.mixed_precision, "--mixed-precision");
    fsdp_options.mixed_precision.reduce_dtype = at::kFloat;
  }
  fsdp_options.cpu_offload = c.cpu_offload;
  // --deterministic: bits independent of the world size too (trainer.h).
  const bool invariant = c.deterministic;
  if (invariant) fsdp_options.reduction_order = fsdp::ReductionOrder::WorldSizeInvariant;
  // --device cuda: rank r computes on GPU local_rank % GPUs (torchrun's convention), where
  // shards are materialised too; data windows are copied there per micro-step.
  auto device = runtime::parse_device(c.device, "--device");
  if (device.is_cuda() && !device.has_index())
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % runtime::cuda_device_count()));
  runtime::set_current_device(device);
  if (device.is_cuda()) fsdp_options.device = device;
  auto lm = build_model(c, checked.model_config, comm.rank(), fsdp_options);
  const int64_t parameters = parameter_count(*lm.module);
  const int64_t seq_len = checked.seq_len;
  auto train_set = open_dataset(c.data, "--data", seq_len, lm.vocab_size);
  std::optional<data::TokenDataset> eval_set;
  if (!c.eval_data.empty()) eval_set = open_dataset(c.eval_data, "--eval-data", seq_len, lm.vocab_size);

  TrainResult result;
  result.run_dir = std::filesystem::path(c.save_dir) / c.experiment_name;
  result.hf_dir = result.run_dir / "hf";
  const auto checkpoints_dir = result.run_dir / "checkpoints";
  const auto resume_from = resume_checkpoint(comm, c, checkpoints_dir);
  // A run directory is never overwritten. Rerunning the same command (--resume auto)
  // continues from the newest complete checkpoint; where the earlier run stopped before
  // its first one (found by ci/fault_trials.sh: killed in or before its first save, it
  // could not be rerun), it starts over at step 0 and appends to the earlier metrics. A
  // run that logged a committed checkpoint and has none left, or --resume never, is refused.
  const auto metrics_path = result.run_dir / "metrics.jsonl";
  bool start_over = false;
  if (lead && !resume_from && std::filesystem::exists(metrics_path)) {
    if (c.resume != "auto" || logs_committed_checkpoint(metrics_path))
      throw std::runtime_error(metrics_path.string() +
                               " exists and the run has no complete checkpoint to resume from: choose another "
                               "--experiment-name or --save-dir, or remove that run");
    start_over = true;
    std::printf("note: %s logs no committed checkpoint (the run stopped before its first one): starting over at "
                "step 0, appending to it\n",
                metrics_path.string().c_str());
    std::fflush(stdout);
  }

  auto sharded =
      fsdp::ShardedModel::create(lm.module, comm, fsdp_options, make_wrap_policy(c.wrap_policy, lm.block_type));
  if (c.activation_checkpointing)
    fsdp::apply_activation_checkpointing(*lm.module, fsdp::CheckpointPolicy{{lm.block_type}, c.ac_freq});
  auto optimizer = optim::make_adamw(sharded->named_parameters(), c.adamw);
  TrainStepOptions step_options;
  step_options.rows_per_micro_batch = c.batch_size;
  step_options.seq_len = checked.seq_len;
  step_options.grad_accum_steps = c.grad_accum_steps;
  step_options.grad_clip = c.grad_clip;
  step_options.world_size_invariant = invariant;
  // fp16's narrow range needs dynamic loss scaling (bf16 has fp32's exponent range).
  step_options.loss_scaling = c.mixed_precision == "fp16" || c.loss_scaling;
  step_options.loss_scale_growth_interval = c.loss_scale_growth_interval;
  TrainStep train_step(comm, lm, sharded.get(), *optimizer, step_options);

  data::SamplerOptions so;
  so.num_windows = train_set.num_windows(seq_len);
  so.batch_per_rank = c.batch_size;
  so.world_size = world;
  so.rank = comm.rank();
  so.grad_accum = c.grad_accum_steps;
  so.shuffle = c.shuffle;
  so.seed = c.seed;
  data::DistributedSampler sampler(so);
  const TrainCheckpointParts checkpoint_parts{*sharded, *optimizer, train_step.scaler(), sampler,
                                              checked.model_config};
  int64_t start_step = 0;
  if (resume_from) {
    const auto restored = restore_train_checkpoint(comm, *resume_from, checkpoint_parts);
    start_step = restored.step;
    if (lead) {
      std::printf("resuming from %s: %lld optimizer steps done\n", resume_from->string().c_str(),
                  static_cast<long long>(start_step));
      const std::string note = batch_change_note(restored.train_state, c, world);
      if (!note.empty()) std::printf("note: %s\n", note.c_str());
      std::fflush(stdout);
    }
  }
  const int64_t global_batch = sampler.global_batch();
  const int64_t total_steps =
      c.max_steps > 0 ? c.max_steps
                      : static_cast<int64_t>(std::ceil(c.num_epochs * static_cast<double>(so.num_windows) /
                                                       static_cast<double>(global_batch)));
  optim::LrSchedule schedule{c.adamw.lr, c.min_lr, c.warmup_steps, total_steps, c.lr_decay};
  const int64_t tokens_per_step = train_step.tokens_per_step();

  const std::string tokenizer = tokenizer_source(c);
  std::unique_ptr<MetricsLog> metrics;
  std::unique_ptr<ProgressBar> progress;
  if (lead) {
    auto mem = sharded->memory();
    metrics = std::make_unique<MetricsLog>(
        result.run_dir / "metrics.jsonl",
        nlohmann::json{{"kind", "run"}, {"format", "fsdpp.metrics"}, {"version", 1}, {"start_step", start_step},
                       {"world_size", world}, {"model_type", lm.model_type},
                       {"parameters", parameters}, {"shard_bytes", mem.shard_bytes},
                       {"seq_len", seq_len}, {"global_batch", global_batch}, {"total_steps", total_steps},
                       {"train_windows", so.num_windows}, {"config", c.to_json()}},
        /*append=*/resume_from.has_value() || start_over);
    std::printf("training %s (%lld parameters) on %d rank(s), %s: %lld steps of %lld windows x %lld tokens\n",
                lm.model_type.c_str(), static_cast<long long>(parameters), world,
                fsdp::to_string(c.fsdp.strategy).c_str(), static_cast<long long>(total_steps),
                static_cast<long long>(global_batch), static_cast<long long>(seq_len));
    std::fflush(stdout);
    progress = std::make_unique<ProgressBar>(total_steps);
  }

  auto run_eval = [&](int64_t step) {
    auto score = evaluate(comm, lm, *eval_set, seq_len, c.batch_size, c.eval_max_windows, device);
    if (lead) {
      metrics->write({{"kind", "eval"}, {"step", step}, {"eval_loss", score.loss},
                      {"eval_perplexity", score.perplexity}, {"eval_tokens", score.tokens}});
      progress->clear();
      std::printf("eval  step %lld | loss %.4f | perplexity %.2f | %lld tokens\n", static_cast<long long>(step),
                  score.loss, score.perplexity, static_cast<long long>(score.tokens));
      std::fflush(stdout);
    }
    return score;
  };
  if (eval_set && start_step == 0) result.eval_before = run_eval(0);

  TrainCheckpointer checkpointer(comm, checkpoints_dir, c);
  // Rank 0 logs every save that committed (or failed) since the last call.
  auto report_checkpoints = [&] {
    for (const auto& record : checkpointer.take_committed()) {
      if (!lead) continue;
      metrics->write(record);
      progress->clear();
      if (record.contains("error")) {
        std::printf("warning: checkpoint step %lld failed in the background: %s (the next save or the end of "
                    "training stops the run)\n",
                    static_cast<long long>(record["step"].get<int64_t>()), record["error"].get<std::string>().c_str());
      } else {
        std::printf("checkpoint step %lld -> %s", static_cast<long long>(record["step"].get<int64_t>()),
                    record["dir"].get<std::string>().c_str());
        if (record["async"].get<bool>())
          std::printf(" (written in the background: %.0f ms, training held %.0f ms)", record["save_ms"].get<double>(),
                      record["blocked_ms"].get<double>());
        std::printf("\n");
        for (const auto& w : record["warnings"]) std::printf("warning: %s\n", w.get<std::string>().c_str());
      }
      std::fflush(stdout);
    }
  };

  const auto run_start = Clock::now();
  double tokens_per_s_sum = 0;
  for (int64_t step = start_step; step < total_steps; ++step) {
    const auto step_start = Clock::now();
    const double lr = schedule.at(step);
    sharded->reset_comm_stats();
    const StepRecord done = train_step.run(lr, [&](int micro) {
      auto [inputs, targets] = train_set.windows(sampler.micro_batch(micro), seq_len);
      return MicroBatch{inputs.to(device), targets.to(device)};
    });
    sampler.advance();
    const double loss = done.loss;
    const double step_ms = ms_since(step_start);
    const double tokens_per_s = static_cast<double>(tokens_per_step) / (step_ms / 1000.0);
    if (step == start_step) result.first_loss = loss;  // this process's first step, also after a resume
    result.last_loss = loss;
    if (step > start_step) tokens_per_s_sum += tokens_per_s;

    if (lead) {
      auto mem = sharded->memory();
      const auto device_mem = runtime::device_memory(device);  // the device training runs on
      metrics->write({{"kind", "train"}, {"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", done.grad_norm},
                      {"tokens_per_s", tokens_per_s}, {"tokens", (step + 1) * tokens_per_step},
                      {"epoch", static_cast<double>(sampler.position()) / static_cast<double>(so.num_windows)},
                      {"time_ms", {{"data", done.data_ms}, {"forward", done.forward_ms},
                                   {"backward", done.backward_ms}, {"optimizer", done.optimizer_ms}, {"step", step_ms}}},
                      {"memory", {{"peak_rss_bytes", peak_rss_bytes()}, {"shard_bytes", mem.shard_bytes},
                                  {"peak_unsharded_bytes", mem.peak_unsharded_bytes},
                                  {"allocated_bytes", device_mem.allocated_bytes},
                                  {"reserved_bytes", device_mem.reserved_bytes},
                                  {"window_peak_allocated_bytes", device_mem.peak_allocated_bytes},
                                  {"window_peak_reserved_bytes", device_mem.peak_reserved_bytes}}},
                      {"comm_bytes_sent", comm_bytes(*sharded)},
                      {"optimizer_step", done.optimizer_stepped},
                      {"loss_scale", done.loss_scale}});
      if ((step + 1) % c.log_freq == 0 || step + 1 == total_steps || step == 0) {
        progress->clear();
        std::printf("step %lld/%lld | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tok/s | %.0f ms "
                    "(data %.0f, fwd %.0f, bwd %.0f, opt %.0f) | rss %.0f MiB\n",
                    static_cast<long long>(step + 1), static_cast<long long>(total_steps), loss, lr, done.grad_norm,
                    tokens_per_s, step_ms, done.data_ms, done.forward_ms, done.backward_ms, done.optimizer_ms,
                    static_cast<double>(peak_rss_bytes()) / (1 << 20));
        std::fflush(stdout);
        runtime::reset_peak_memory(device);  // peaks are per logging window, like get_mem_stats
      }
      progress->update(step + 1, loss, std::chrono::duration<double>(Clock::now() - run_start).count());
    }
    if (eval_set && c.eval_freq > 0 && (step + 1) % c.eval_freq == 0 && step + 1 != total_steps) run_eval(step + 1);
    if ((c.ckpt_freq > 0 && (step + 1) % c.ckpt_freq == 0) || step + 1 == total_steps)
      checkpointer.save(step + 1, checkpoint_parts);
    report_checkpoints();
    // The resume tests' crash (TrainHooks): every rank dies by SIGKILL right after this
    // step, its checkpoint (if any) committed, asynchronous or not.
    if (hooks.crash_after_step == step + 1) {
      checkpointer.finish();
      report_checkpoints();
      ::raise(SIGKILL);
    }
  }
  checkpointer.finish();  // the last save commits while nothing else runs
  report_checkpoints();
  result.steps = total_steps;
  result.start_step = start_step;
  if (total_steps - start_step > 1)
    result.mean_tokens_per_s = tokens_per_s_sum / static_cast<double>(total_steps - start_step - 1);
  if (eval_set) result.eval_after = run_eval(total_steps);
  if (progress) progress->finish();
  export_hf(comm, *sharded, lm, tokenizer, result.hf_dir);
  if (lead) {
    metrics->close();
    std::printf("wrote %s\n", result.hf_dir.string().c_str());
  }
  return result;
}

}  // namespace fsdpp::train
