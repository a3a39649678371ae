#include "harness/bench/step_bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "core/compat/torch_compat.h"
#include "core/fsdp/activation_checkpointing.h"
#include "core/fsdp/sharded_model.h"
#include "core/models/causal_lm.h"
#include "core/models/presets.h"
#include "core/nn/deferred_init.h"
#include "core/optim/adamw.h"
#include "core/runtime/device.h"

namespace fsdpp::harness {

namespace {

using Clock = std::chrono::steady_clock;

int64_t config_int(const nlohmann::json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (c.contains(k) && c[k].is_number()) return c[k].get<int64_t>();
  return 0;
}

// See the header: 6 * matmul parameters + 12 * layers * attention width * seq_len.
double model_flops_per_token(const torch::nn::Module& module, const nlohmann::json& config, int64_t seq_len) {
  bool separate_head = false;
  for (const auto& item : module.named_parameters(true))
    if (item.key() == "lm_head.weight") separate_head = true;
  double matmul_params = 0;
  for (const auto& item : module.named_parameters(true)) {  // unique tensors: a tie counts once
    const std::string& name = item.key();
    if (item.value().dim() < 2) continue;  // biases, norms
    if (name.find("wpe") != std::string::npos || name.find("embed_positions") != std::string::npos) continue;
    bool token_embedding = name.find("wte") != std::string::npos || name.find("embed_tokens") != std::string::npos;
    if (token_embedding && separate_head) continue;  // a lookup; the head is counted itself
    matmul_params += static_cast<double>(item.value().numel());
  }
  int64_t layers = config_int(config, {"n_layer", "num_hidden_layers"});
  int64_t heads = config_int(config, {"n_head", "num_attention_heads"});
  int64_t hidden = config_int(config, {"n_embd", "hidden_size"});
  int64_t head_dim = config_int(config, {"head_dim"});
  int64_t width = head_dim > 0 ? heads * head_dim : hidden;
  return 6.0 * matmul_params + 12.0 * static_cast<double>(layers * width * seq_len);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

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
  return 2.0 * static_cast<double>(n) * n * n / (median(ms) / 1e3);
}

nlohmann::json run_step_bench(comm::Communicator& comm, int local_rank, const StepBenchConfig& c) {
  auto device = runtime::parse_device(c.device, "--device");
  if (device.is_cuda() && !device.has_index())
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % runtime::cuda_device_count()));
  runtime::set_current_device(device);
  const auto compute_dtype = runtime::parse_compute_dtype(c.mixed_precision, "--mixed-precision");

  // The model: built on the meta device, each rank materialising its own rows on `device`.
  auto config = models::from_scratch_config(c.model_type, c.model_size, c.vocab_size);
  const std::string source = c.model_type + " " + c.model_size;
  fsdp::FsdpOptions options;
  options.strategy = c.strategy;
  options.device = device;
  options.cpu_offload = c.cpu_offload;
  options.forward_prefetch = c.prefetch;
  options.backward_prefetch = c.prefetch ? fsdp::BackwardPrefetch::Pre : fsdp::BackwardPrefetch::None;
  if (compute_dtype != at::kFloat) {
    options.mixed_precision.param_dtype = compute_dtype;
    options.mixed_precision.reduce_dtype = at::kFloat;
  }
  options.materialize = models::seeded_rows(c.seed);
  models::CausalLm lm = [&] {
    nn::DeferredInit deferred;
    return models::build_causal_lm(config, source);
  }();
  if (c.seq_len > lm.max_positions)
    throw std::invalid_argument("--seq-len " + std::to_string(c.seq_len) + " exceeds the model's " +
                                std::to_string(lm.max_positions) + " positions");
  runtime::reset_peak_memory(device);
  auto sharded = fsdp::ShardedModel::create(lm.module, comm, options, fsdp::wrap_by_module_type({lm.block_type}));
  if (c.activation_checkpointing)
    fsdp::apply_activation_checkpointing(*lm.module, fsdp::CheckpointPolicy{{lm.block_type}, 1});
  optim::AdamWSettings adam;
  adam.lr = 3e-4;
  adam.weight_decay = 0.1;
  auto optimizer = optim::make_adamw(sharded->named_parameters(), adam);
  runtime::synchronize(device);
  const int64_t persistent_bytes = runtime::device_memory(device).allocated_bytes;

  auto gen = at::detail::createCPUGenerator(c.seed * 1000003 + static_cast<uint64_t>(comm.rank()));
  auto tokens = at::randint(0, lm.vocab_size, {c.batch_size, c.seq_len + 1}, gen, at::TensorOptions().dtype(at::kLong))
                    .to(device);
  auto inputs = tokens.narrow(1, 0, c.seq_len).contiguous(), targets = tokens.narrow(1, 1, c.seq_len).contiguous();

  std::vector<double> step_ms, losses;
  for (int step = -c.warmup_steps; step < c.steps; ++step) {
    if (step == 0) {
      sharded->reset_comm_stats();
      runtime::reset_peak_memory(device);
    }
    runtime::synchronize(device);
    comm.barrier();
    auto t0 = Clock::now();
    optimizer->zero_grad();
    auto logits = lm.logits(inputs);
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(at::kFloat),
                                                     targets.reshape({-1}));
    logits = at::Tensor();
    loss.backward();
    sharded->clip_grad_norm(1.0);
    optimizer->step();
    runtime::synchronize(device);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    auto slowest = torch::tensor({ms}, torch::kDouble);
    comm.all_reduce(slowest, comm::ReduceOp::Max);
    if (step >= 0) {
      step_ms.push_back(slowest.item<double>());
      losses.push_back(loss.item<double>());
    }
  }
  auto memory = runtime::device_memory(device);

  const double tokens_per_step = static_cast<double>(c.batch_size * c.seq_len * comm.size());
  const double total_ms = [&] {
    double t = 0;
    for (double ms : step_ms) t += ms;
    return t;
  }();
  const double tokens_per_s = tokens_per_step * step_ms.size() / (total_ms / 1e3);
  const double flops_per_token = model_flops_per_token(*lm.module, config, c.seq_len);
  const double achieved = flops_per_token * tokens_per_s / comm.size();  // per device
  const double peak = measure_matmul_flops(device.str(), c.mixed_precision, device.is_cuda() ? 8192 : 1024,
                                           device.is_cuda() ? 10 : 3);
  int64_t params = 0;
  for (const auto& p : lm.module->named_parameters(true)) params += p.value().numel();  // a tie once

  nlohmann::json comm_json = nlohmann::json::object();
  for (auto kind : {comm::CollectiveKind::AllGather, comm::CollectiveKind::ReduceScatter,
                    comm::CollectiveKind::AllReduce}) {
    auto s = sharded->comm_stats(kind);
    comm_json[comm::to_string(kind)] = {{"calls_per_step", static_cast<double>(s.calls) / c.steps},
                                        {"bytes_sent_per_step", static_cast<double>(s.bytes_sent) / c.steps}};
  }
  const std::string strategy = fsdp::to_string(c.strategy);
  return {
      {"format", "fsdpp.bench-cell"},
      {"version", 1},
      {"config",
       {{"model_type", c.model_type},
        {"model_size", c.model_size},
        {"vocab_size", lm.vocab_size},
        {"batch_size_per_rank", c.batch_size},
        {"seq_len", c.seq_len},
        {"world_size", comm.size()},
        {"strategy", strategy},
        {"mixed_precision", c.mixed_precision},
        {"activation_checkpointing", c.activation_checkpointing},
        {"cpu_offload", c.cpu_offload},
        {"prefetch", c.prefetch},
        {"warmup_steps", c.warmup_steps},
        {"steps", c.steps},
        {"device", device.str()}}},
      {"model_config", config},
      {"parameters", params},
      {"step_ms", step_ms},
      {"step_ms_median", median(step_ms)},
      {"step_ms_min", step_ms.empty() ? 0.0 : *std::min_element(step_ms.begin(), step_ms.end())},
      {"tokens_per_s", tokens_per_s},
      {"model_flops_per_token", flops_per_token},
      {"achieved_flops_per_s_per_device", achieved},
      {"matmul_peak_flops_per_s", peak},
      {"mfu", achieved / peak},
      {"memory_bytes",
       {{"persistent_after_setup", persistent_bytes},
        {"peak_allocated", memory.peak_allocated_bytes},
        {"peak_reserved", memory.peak_reserved_bytes}}},
      {"comm", comm_json},
      {"losses", losses},
      {"device_name", runtime::device_name(device)},
      {"libtorch", compat::torch_version_string()},
  };
}

}  // namespace fsdpp::harness
