#include "harness/bench/step_bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "core/compat/torch_compat.h"
#include "core/data/sampler.h"
#include "core/data/token_dataset.h"
#include "core/fsdp/activation_checkpointing.h"
#include "core/fsdp/sharded_model.h"
#include "core/kernels/cross_entropy.h"
#include "core/models/causal_lm.h"
#include "core/models/layers.h"
#include "core/models/presets.h"
#include "core/nn/checkpoint.h"
#include "core/nn/deferred_init.h"
#include "core/nn/unique_parameters.h"
#include "core/optim/adamw.h"
#include "core/plan/model_shape.h"
#include "core/plan/step_time_model.h"
#include "core/runtime/counting_cpu_allocator.h"
#include "core/runtime/device.h"
#include "core/runtime/host_memory.h"
#include "core/train/train_step.h"
#include "harness/bench/cell_result.h"
#include "harness/bench/step_profiler.h"
#include "harness/results/stats.h"

namespace fsdpp::harness {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

double measure_matmul_flops(const std::string& device_text, const std::string& dtype, int64_t n, int reps) {
  auto device = runtime::parse_device(device_text, "--device");
  auto options = at::TensorOptions().device(device).dtype(runtime::parse_compute_dtype(dtype, "--mixed-precision"));
  auto a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  std::vector<double> ms;
  for (int i = -2; i < reps; ++i) {  // two warm-ups
    runtime::synchronize(device);
    auto t0 = Clock::now();
    auto c = at::matmul(a, b);
    runtime::synchronize(device);
    if (i >= 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const auto side = static_cast<double>(n);
  return 2.0 * side * side * side / (results::median(ms) / 1e3);
}

namespace {

// The cell's memory figures, by name: tensor bytes (CUDA: the caching allocator's
// allocated bytes; CPU: the counting allocator's, when installed) and, on the CPU, the
// process's resident set. Written to the record as rank 0's and as the maximum over ranks.
class MemoryFigures {
 public:
  MemoryFigures(at::Device device, bool count_cpu_tensors)
      : device_(device), counted_(device.is_cuda() || count_cpu_tensors) {
    if (device.is_cpu() && count_cpu_tensors) runtime::CountingCpuAllocator::install();
  }

  // Starts a peak window (tensor bytes, and the host's VmHWM on every device).
  void reset_peaks() const {
    runtime::reset_peak_memory(device_);
    if (device_.is_cpu()) runtime::CountingCpuAllocator::reset_peak();
    if (device_.is_cuda()) runtime::reset_peak_memory(at::Device(at::kCPU));
  }
  // Records the tensor bytes alive now as `name` and the resident set as `rss_name` (on
  // CUDA as host_<rss_name>: with --cpu-offload the host holds the shards and AdamW state).
  void record_allocated(const std::string& name, const std::string& rss_name) {
    runtime::synchronize(device_);
    if (device_.is_cuda()) {
      add(name, runtime::device_memory(device_).allocated_bytes);
      add("host_" + rss_name, runtime::device_memory(at::Device(at::kCPU)).allocated_bytes);
      return;
    }
    if (counted_) add(name, runtime::CountingCpuAllocator::live_bytes());
    add(rss_name, runtime::device_memory(device_).allocated_bytes);
  }
  // Records the peaks of the window: peak_allocated, and peak_reserved and host_rss_peak
  // (CUDA) or rss_peak (CPU).
  void record_peaks() {
    const auto memory = runtime::device_memory(device_);
    if (device_.is_cuda()) {
      add("peak_allocated", memory.peak_allocated_bytes);
      add("peak_reserved", memory.peak_reserved_bytes);
      add("host_rss_peak", runtime::device_memory(at::Device(at::kCPU)).peak_allocated_bytes);
      return;
    }
    if (counted_) add("peak_allocated", runtime::CountingCpuAllocator::peak_bytes());
    add("rss_peak", memory.peak_allocated_bytes);
  }
  // Collective: every figure as rank 0's, and under max_over_ranks the largest rank's.
  nlohmann::json to_json(comm::Communicator& comm) const {
    std::vector<double> values;
    values.reserve(figures_.size());
    for (const auto& f : figures_) values.push_back(static_cast<double>(f.second));
    auto max = torch::tensor(values, torch::kDouble);
    comm.all_reduce(max, comm::ReduceOp::Max);
    nlohmann::json out = nlohmann::json::object(), over_ranks = nlohmann::json::object();
    for (size_t i = 0; i < figures_.size(); ++i) {
      out[figures_[i].first] = figures_[i].second;
      over_ranks[figures_[i].first] = static_cast<int64_t>(max[static_cast<int64_t>(i)].item<double>());
    }
    out["max_over_ranks"] = over_ranks;
    return out;
  }

 private:
  void add(const std::string& name, int64_t bytes) { figures_.emplace_back(name, bytes); }

  at::Device device_;
  bool counted_;
  std::vector<std::pair<std::string, int64_t>> figures_;
};

const std::vector<comm::CollectiveKind>& reported_kinds() {
  static const std::vector<comm::CollectiveKind> kinds = {
      comm::CollectiveKind::AllGather, comm::CollectiveKind::ReduceScatter, comm::CollectiveKind::AllReduce};
  return kinds;
}

// The benchmark's batches. With --data: the windows `fsdpp train` gives this rank at each
// step (DistributedSampler over the dataset, shuffled with the seed, one micro-batch per
// step), so that train and bench-step with the same flags see the same tokens. Without:
// one batch drawn once, randint(0, vocab) from a CPU generator seeded seed * 1000003 +
// rank (torch_peer.py --fixed-batch draws the same), reused every step.
class BatchSource {
 public:
  BatchSource(const StepBenchConfig& c, int64_t vocab_size, const comm::Communicator& comm, at::Device device)
      : seq_len_(c.seq_len), device_(device) {
    if (c.data.empty()) {
      auto gen = at::detail::createCPUGenerator(c.seed * 1000003 + static_cast<uint64_t>(comm.rank()));
      auto tokens = at::randint(0, vocab_size, {c.batch_size, c.seq_len + 1}, gen, at::TensorOptions().dtype(at::kLong))
                        .to(device);
      fixed_ =
          train::MicroBatch{tokens.narrow(1, 0, c.seq_len).contiguous(), tokens.narrow(1, 1, c.seq_len).contiguous()};
      return;
    }
    dataset_.emplace(data::TokenDataset::open(c.data));
    dataset_->require_window(c.seq_len, "--data " + c.data);
    if (dataset_->max_token() >= vocab_size)
      throw std::invalid_argument("--data " + c.data + ": token id " + std::to_string(dataset_->max_token()) +
                                  " is outside the model's vocabulary of " + std::to_string(vocab_size));
    data::SamplerOptions so;
    so.num_windows = dataset_->num_windows(c.seq_len);
    so.batch_per_rank = c.batch_size;
    so.world_size = comm.size();
    so.rank = comm.rank();
    so.seed = c.seed;
    sampler_.emplace(so);
  }

  train::MicroBatch next() {
    if (!dataset_) return *fixed_;
    auto [inputs, targets] = dataset_->windows(sampler_->micro_batch(0), seq_len_);
    sampler_->advance();
    return train::MicroBatch{inputs.to(device_), targets.to(device_)};
  }

 private:
  int64_t seq_len_;
  at::Device device_;
  std::optional<train::MicroBatch> fixed_;
  std::optional<data::TokenDataset> dataset_;
  std::optional<data::DistributedSampler> sampler_;
};

// The step's loss: the causal LM's, with autocast to `autocast` around it unless that is
// fp32 (the unsharded baseline's mixed precision: PyTorch's single-device autocast, where FSDP
// casts its parameters itself).
train::LossFn step_loss(const models::CausalLm& lm, at::ScalarType autocast) {
  if (autocast == at::kFloat)
    return [&lm](const train::MicroBatch& batch) { return train::training_loss(lm, batch.inputs, batch.targets); };
  return [&lm, autocast](const train::MicroBatch& batch) {
    compat::AutocastGuard guard(compat::AutocastState::only(batch.inputs.device().type(), autocast));
    return train::training_loss(lm, batch.inputs, batch.targets);
  };
}

}  // namespace

nlohmann::json run_step_bench(comm::Communicator& comm, int local_rank, const StepBenchConfig& c) {
  auto device =
      runtime::parse_device(c.device.empty() ? (runtime::cuda_available() ? "cuda" : "cpu") : c.device, "--device");
  if (device.is_cuda() && !device.has_index())
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % runtime::cuda_device_count()));
  runtime::set_current_device(device);
  const auto compute_dtype = runtime::parse_compute_dtype(c.mixed_precision, "--mixed-precision");
  if (c.unsharded && comm.size() != 1)
    throw std::invalid_argument("bench: the unsharded baseline runs in one process, not " +
                                std::to_string(comm.size()) + " ranks");
  if (c.inject_delay_pct < 0) throw std::invalid_argument("--inject-delay-pct must be >= 0");
  if (c.deterministic) at::globalContext().setDeterministicAlgorithms(true, false);
  models::set_rms_norm_kernel(c.eager_rms_norm ? models::RmsNormKernel::Eager : models::RmsNormKernel::Fused);
  nn::set_recompute_skips_summed(!c.full_recompute);

  // The model: sharded, built on the meta device, each rank materialising its own rows on
  // `device`; unsharded, built whole with the same values (init_rows = init_from_scratch).
  auto config = models::from_scratch_config(c.model_type, c.model_size, c.vocab_size);
  const std::string source = c.model_type + " " + c.model_size;
  // Before the model's first tensor: on the CPU, the counting allocator must see it.
  MemoryFigures memory_figures(device, c.count_cpu_tensors);
  memory_figures.reset_peaks();
  std::shared_ptr<fsdp::ShardedModel> sharded;
  models::CausalLm lm;
  if (c.unsharded) {
    lm = models::build_causal_lm(config, source);
    models::init_from_scratch(lm, c.seed);
    lm.module->to(device);
  } else {
    fsdp::FsdpOptions options;
    options.strategy = c.strategy;
    options.hybrid_shard_size = c.hybrid_shard_size;
    options.device = device;
    options.cpu_offload = c.cpu_offload;
    options.forward_prefetch = c.prefetch;
    options.backward_prefetch = c.prefetch ? fsdp::BackwardPrefetch::Pre : fsdp::BackwardPrefetch::None;
    if (compute_dtype != at::kFloat) {
      options.mixed_precision.param_dtype = compute_dtype;
      options.mixed_precision.reduce_dtype = at::kFloat;
    }
    options.materialize = models::seeded_rows(c.seed, c.model_type);
    lm = [&] {
      nn::DeferredInit deferred;
      return models::build_causal_lm(config, source);
    }();
    options.gradients_may_differ_across_ranks = lm.data_dependent_parameters;
    sharded = fsdp::ShardedModel::create(lm.module, comm, options, fsdp::wrap_by_module_type({lm.block_type}));
  }
  if (c.seq_len > lm.max_positions)
    throw std::invalid_argument("--seq-len " + std::to_string(c.seq_len) + " exceeds the model's " +
                                std::to_string(lm.max_positions) + " positions");
  if (c.activation_checkpointing)
    fsdp::apply_activation_checkpointing(*lm.module, fsdp::CheckpointPolicy{{lm.block_type}, 1});
  optim::AdamWSettings adam;
  adam.lr = 3e-4;
  adam.weight_decay = 0.1;
  adam.fused = !c.per_tensor_adamw;
  auto optimizer =
      optim::make_adamw(sharded ? sharded->named_parameters() : nn::unique_named_parameters(*lm.module), adam);
  // The step `fsdpp train` runs (core/train/train_step.h), with the benchmark's fixed
  // choices: one micro-batch, clipping at 1.0, loss scaling with fp16 as in training.
  train::TrainStepOptions step_options;
  step_options.rows_per_micro_batch = c.batch_size;
  step_options.seq_len = c.seq_len;
  step_options.grad_clip = 1.0;
  step_options.loss_scaling = compute_dtype == at::kHalf;
  train::TrainStep train_step(comm, step_loss(lm, c.unsharded ? compute_dtype : at::kFloat), sharded.get(), *optimizer,
                              step_options);
  memory_figures.record_allocated("persistent_after_setup", "rss_after_setup");

  // Batches: from --data as `fsdpp train` draws them, or one fixed random batch per rank.
  BatchSource batches(c, lm.vocab_size, comm, device);

  std::vector<double> step_ms, losses, injected_ms;
  // Rank 0's host time in each phase of each timed step (train::StepRecord's).
  std::map<std::string, std::vector<double>> phase_ms;
  StepProfiler profiler(comm.rank() == 0 ? c.profile_trace : "", device.is_cuda());
  for (int step = -c.warmup_steps; step < c.steps; ++step) {
    if (step == 0) {
      if (sharded) sharded->reset_comm_stats();
      // What stays between steps: parameters (shards), optimizer state, kept buffers.
      memory_figures.record_allocated("persistent_between_steps", "rss_between_steps");
      memory_figures.reset_peaks();
      profiler.start();
    }
    runtime::synchronize(device);
    comm.barrier();
    RECORD_USER_SCOPE(kStepScope);
    auto t0 = Clock::now();
    const train::StepRecord done = train_step.run(adam.lr, [&](int) { return batches.next(); });
    runtime::synchronize(device);
    double delay_ms = 0;
    if (c.inject_delay_pct > 0) {
      delay_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() * c.inject_delay_pct / 100;
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
    }
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    auto slowest = torch::tensor({ms}, torch::kDouble);
    comm.all_reduce(slowest, comm::ReduceOp::Max);
    if (step >= 0) {
      step_ms.push_back(slowest.item<double>());
      losses.push_back(done.loss);
      injected_ms.push_back(delay_ms);
      phase_ms["data"].push_back(done.data_ms);
      phase_ms["forward"].push_back(done.forward_ms);
      phase_ms["backward"].push_back(done.backward_ms);
      phase_ms["optimizer"].push_back(done.optimizer_ms);
    }
  }
  profiler.stop_and_save();
  memory_figures.record_peaks();

  const double tokens_per_step = static_cast<double>(c.batch_size * c.seq_len * comm.size());
  const double total_ms = [&] {
    double t = 0;
    for (double ms : step_ms) t += ms;
    return t;
  }();
  const double tokens_per_s = tokens_per_step * static_cast<double>(step_ms.size()) / (total_ms / 1e3);
  // core/plan/step_time_model.h: the one FLOPs formula, read off the config's model built
  // on the meta device (the same shapes as lm's, whatever its sharded state).
  const double flops_per_token = plan::model_flops_per_token(plan::ModelShape::of_config(config, source), c.seq_len);
  const double achieved = flops_per_token * tokens_per_s / comm.size();  // per device
  const double peak =
      measure_matmul_flops(device.str(), c.mixed_precision, device.is_cuda() ? 8192 : 1024, device.is_cuda() ? 10 : 3);
  // The vendor's dense bf16 peak, as torchtitan's MFU divides by (bf16 cells on a listed GPU).
  // 0: none (gcc cannot follow an optional through the json initialiser below).
  const double datasheet =
      c.mixed_precision == "bf16" ? datasheet_bf16_flops_per_s(runtime::device_name(device)).value_or(0.0) : 0.0;
  int64_t params = 0;
  std::set<const void*> counted;  // LibTorch's named_parameters lists a tie under each name: count it once
  for (const auto& p : lm.module->named_parameters(true))
    if (counted.insert(p.value().unsafeGetTensorImpl()).second) params += p.value().numel();

  // Communication: bytes are rank 0's (every rank sends the same); times are summed over
  // ranks here and reported as the mean rank's.
  const auto& kinds = reported_kinds();
  std::vector<double> times;  // busy ms per kind, then blocked ms per kind (this rank)
  times.reserve(2 * kinds.size());
  for (auto kind : kinds) times.push_back(sharded ? sharded->comm_stats(kind).busy_ms : 0.0);
  for (auto kind : kinds) times.push_back(sharded ? sharded->comm_stats(kind).blocked_ms : 0.0);
  auto time_sums = torch::tensor(times, torch::kDouble);
  comm.all_reduce(time_sums, comm::ReduceOp::Sum);
  nlohmann::json memory_json = memory_figures.to_json(comm);
  const double ranks = comm.size();
  nlohmann::json comm_json = nlohmann::json::object();
  double busy_total = 0, blocked_total = 0;
  for (size_t k = 0; k < kinds.size(); ++k) {
    auto s = sharded ? sharded->comm_stats(kinds[k]) : comm::KindStats{};
    double busy = time_sums[static_cast<int64_t>(k)].item<double>() / ranks / c.steps;
    double blocked = time_sums[static_cast<int64_t>(k + kinds.size())].item<double>() / ranks / c.steps;
    busy_total += busy;
    blocked_total += blocked;
    comm_json[comm::to_string(kinds[k])] = {{"calls_per_step", static_cast<double>(s.calls) / c.steps},
                                            {"bytes_sent_per_step", static_cast<double>(s.bytes_sent) / c.steps},
                                            {"busy_ms_per_step", busy},
                                            {"exposed_ms_per_step", blocked}};
  }
  const std::string strategy = c.unsharded ? "unsharded" : fsdp::to_string(c.strategy);
  const int64_t param_bytes = [&] {
    if (sharded) return sharded->memory().shard_bytes;
    int64_t bytes = 0;
    for (const auto& p : nn::unique_parameters(*lm.module))
      bytes += p.tensor.numel() * static_cast<int64_t>(p.tensor.element_size());
    return bytes;
  }();
  memory_json["parameter_bytes"] = param_bytes;
  nlohmann::json record = {
      {"format", "fsdpp.bench-cell"},
      {"version", 2},
      {"config",
       {{"model_type", c.model_type},
        {"model_size", c.model_size},
        {"vocab_size", lm.vocab_size},
        {"batch_size_per_rank", c.batch_size},
        {"seq_len", c.seq_len},
        {"world_size", comm.size()},
        {"strategy", strategy},
        {"hybrid_shard_size", sharded ? sharded->shard_group_size() : 1},
        {"mixed_precision", c.mixed_precision},
        {"activation_checkpointing", c.activation_checkpointing},
        {"cpu_offload", c.cpu_offload},
        {"prefetch", c.prefetch},
        {"deterministic", c.deterministic},
        {"inject_delay_pct", c.inject_delay_pct},
        {"warmup_steps", c.warmup_steps},
        {"steps", c.steps},
        {"threads", at::get_num_threads()},
        {"device", device.str()}}},
      {"model_config", config},
      {"parameters", params},
      {"adamw_step", optim::step_implementation(*optimizer)},
      {"host_heap", runtime::host_heap_policy()},
      {"step_ms", step_ms},
      {"injected_delay_ms", injected_ms},  // this rank's sleep inside each timed step (requested)
      {"phase_ms", phase_ms},
      {"step_ms_median", results::median(step_ms)},
      {"step_ms_min", step_ms.empty() ? 0.0 : *std::min_element(step_ms.begin(), step_ms.end())},
      {"tokens_per_s", tokens_per_s},
      {"model_flops_per_token", flops_per_token},
      {"achieved_flops_per_s_per_device", achieved},
      {"matmul_peak_flops_per_s", peak},
      {"mfu", achieved / peak},
      {"datasheet_peak_flops_per_s", datasheet > 0 ? nlohmann::json(datasheet) : nlohmann::json(nullptr)},
      {"mfu_datasheet", datasheet > 0 ? nlohmann::json(achieved / datasheet) : nlohmann::json(nullptr)},
      {"memory_bytes", memory_json},
      {"comm", comm_json},
      {"comm_ms_per_step", busy_total},
      {"exposed_comm_ms_per_step", blocked_total},
      {"losses", losses},
      {"device_name", runtime::device_name(device)},
      {"libtorch", compat::torch_version_string()},
  };
  if (c.model_type == "llama") record["rms_norm"] = models::rms_norm_kernel_name(device);
  record["cross_entropy"] = kernels::cross_entropy_kernel_name(device);
  if (c.activation_checkpointing) record["recompute"] = nn::recompute_skips_summed() ? "skips-summed" : "full";
  return record;
}

}  // namespace fsdpp::harness
