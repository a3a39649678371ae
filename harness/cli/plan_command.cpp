#include "harness/cli/plan_command.h"

#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "core/io/atomic_file.h"
#include "core/io/hf_config.h"
#include "core/models/presets.h"
#include "core/plan/fit_search.h"
#include "core/plan/plan_document.h"
#include "harness/cli/train_command.h"
#include "harness/cli/usage_error.h"

namespace fsdpp::cli {

namespace {

// The checked inputs of one run: the model and the configuration.
struct PlanInputs {
  std::string model;        // as named on the command line
  std::string model_flags;  // the same, as `fsdpp train` flags
  plan::ModelShape shape;
  plan::PlanConfig config;
};

// --json's document, written atomically (a failed write leaves an earlier file whole).
void write_json(const std::string& path, const nlohmann::json& document) {
  try {
    io::write_file_atomic(path, document.dump(2) + "\n");
  } catch (const std::exception& e) {
    throw UsageError("--json " + path + ": cannot write the file: " + e.what());
  }
}

}  // namespace

void PlanCommand::add_to(CLI::App& app) {
  command_ = app.add_subcommand("plan", "Predict per-rank memory, collective bytes and step time of a configuration");
  auto* c = command_;
  c->add_option("--model-type", model_type_,
                "A from-scratch family: gpt2, opt, llama, mistral, qwen2, qwen3, qwen3_moe, gemma2, gemma3_text, phi, "
                "phi3, mixtral or falcon");
  c->add_option("--model-size", model_size_, "A preset size of that family (e.g. 124M, 1B, 70B)");
  c->add_option("--model", model_dir_, "A Hugging Face model folder (its config.json) instead");
  c->add_option("--vocab-size", vocab_size_, "Presets: vocabulary size instead of the preset's")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--strategy", strategy_, "full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2");
  c->add_option("--nproc", nproc_, "Ranks (GPUs) per node")->check(CLI::Range(1, 1 << 16));
  c->add_option("--nodes", nodes_, "Nodes")->check(CLI::Range(1, 1 << 16));
  c->add_option("--hybrid-shard-size", hybrid_shard_size_,
                "Hybrid strategies: ranks per shard group (default: a node's ranks on several nodes; on one, the "
                "largest divisor of the world below it)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--mixed-precision", mixed_precision_, "fp32, bf16 or fp16");
  c->add_flag("--activation-checkpointing", activation_checkpointing_, "Recompute blocks' activations in backward");
  c->add_option("--ac-freq", ac_freq_, "With --activation-checkpointing: every k-th block (1: all)")
      ->check(CLI::PositiveNumber);
  c->add_flag("--cpu-offload", cpu_offload_, "Shards, gradients and optimizer state in host memory");
  c->add_flag("--no-prefetch", no_prefetch_, "Without forward and backward prefetching");
  c->add_option("--no-reshard-after-forward", no_reshard_after_forward_,
                "Units (comma-separated indices in module order, -1: the last) kept unsharded from forward to "
                "backward, as fsdpp train's flag");
  c->add_option("--reshard-after-forward-group-size", reshard_after_forward_group_size_,
                "Every other unit keeps 1/K of its gathered parameters after forward and all-gathers over K ranks in "
                "backward, as fsdpp train's flag (0: off)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--batch-size", batch_size_, "Windows per rank per micro-step")->check(CLI::PositiveNumber);
  c->add_option("--seq-len", seq_len_, "Tokens per window (default: the model's positions)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--grad-accum-steps", grad_accum_steps_, "Micro-steps per optimizer step")->check(CLI::PositiveNumber);
  c->add_option("--gpu-memory", gpu_memory_,
                "Device memory per GPU: bytes with a unit (80GB, 24GiB) or a kind, h100, h200 or a100-80g (its memory "
                "and rates; a plain size assumes H100 rates)");
  c->add_option("--host-memory", host_memory_, "Host memory per node (with --cpu-offload), e.g. 1TB");
  c->add_option(
      "--link-bandwidth", link_bandwidth_,
      "Per-rank collective bandwidth, e.g. 450GB/s or 400Gb/s (default: NVLink 4 on one node, 50 GB/s across)");
  c->add_option("--json", json_out_, "Write the fsdpp.plan document (core/plan/PLAN.md) to this file");
  c->add_flag("--fit", fit_, "Search strategy x AC x offload x micro-batch for the fastest that fits --gpu-memory");
}

bool PlanCommand::parsed() const { return command_ != nullptr && command_->parsed(); }

void PlanCommand::check() {
  const bool preset = !model_type_.empty() || !model_size_.empty();
  if (preset == !model_dir_.empty())
    throw UsageError("plan: name the model with --model-type and --model-size, or with --model DIR (one of them)");
  if (preset && (model_type_.empty() || model_size_.empty()))
    throw UsageError("plan: --model-type and --model-size go together");
  if (!model_dir_.empty() && vocab_size_ > 0) throw UsageError("plan: --vocab-size applies to presets, not --model");
  fsdp::parse_strategy(strategy_);               // throws naming the accepted names
  plan::compute_element_size(mixed_precision_);  // throws naming --mixed-precision
  if (!gpu_memory_.empty()) plan::gpu_memory_device(gpu_memory_);
  if (!host_memory_.empty()) plan::parse_bytes(host_memory_, "--host-memory");
  if (!link_bandwidth_.empty()) plan::parse_bandwidth(link_bandwidth_, "--link-bandwidth");
  if (fit_ && gpu_memory_.empty()) throw UsageError("--fit needs --gpu-memory (the memory to fit in)");
  if (!activation_checkpointing_ && ac_freq_ != 1) throw UsageError("--ac-freq needs --activation-checkpointing");
  parse_unit_indices(no_reshard_after_forward_, "--no-reshard-after-forward");  // throws naming the flag
}

int PlanCommand::run(const std::vector<std::string>& /*argv*/) {
  PlanInputs in = read_input([&] {
    PlanInputs r;
    nlohmann::json config;
    if (!model_dir_.empty()) {
      config = io::load_hf_config(model_dir_).raw;
      r.model = model_dir_;
      r.model_flags = "--model " + model_dir_;
    } else {
      config = models::from_scratch_config(model_type_, model_size_, vocab_size_);
      r.model = model_type_ + " " + model_size_;
      r.model_flags = "--from-scratch --model-type " + model_type_ + " --model-size " + model_size_ +
                      (vocab_size_ > 0 ? " --vocab-size " + std::to_string(vocab_size_) : "");
    }
    r.shape = plan::ModelShape::of_config(config, r.model);
    auto& c = r.config;
    c.strategy = fsdp::parse_strategy(strategy_);
    c.nproc = nproc_;
    c.nodes = nodes_;
    c.hybrid_shard_size = hybrid_shard_size_;
    c.mixed_precision = mixed_precision_;
    c.activation_checkpointing = activation_checkpointing_;
    c.ac_freq = ac_freq_;
    c.cpu_offload = cpu_offload_;
    c.prefetch = !no_prefetch_;
    c.no_reshard_after_forward = parse_unit_indices(no_reshard_after_forward_, "--no-reshard-after-forward");
    c.reshard_after_forward_group_size = reshard_after_forward_group_size_;
    c.batch_size = batch_size_;
    c.seq_len = seq_len_ > 0 ? seq_len_ : r.shape.max_positions;
    c.grad_accum_steps = grad_accum_steps_;
    c.device = gpu_memory_.empty() ? plan::DeviceSpec{"cpu", 0, 0, 0} : plan::gpu_memory_device(gpu_memory_);
    c.fused_cross_entropy = c.device.name != "cpu";  // as a CUDA build trains on a GPU
    if (!host_memory_.empty()) c.host_memory_bytes = plan::parse_bytes(host_memory_, "--host-memory");
    if (!link_bandwidth_.empty()) c.link_bytes_per_s = plan::parse_bandwidth(link_bandwidth_, "--link-bandwidth");
    plan::estimate_memory(r.shape, c);  // a configuration that cannot run is bad input
    if (c.device.memory_bytes > 0) {
      // A memory no configuration of this model on this world can fit in: below the
      // frugal plan's peak (FULL_SHARD, every block checkpointed, CPU offload, batch 1).
      plan::PlanConfig frugal = c;
      frugal.strategy = fsdp::ShardingStrategy::FullShard;
      frugal.activation_checkpointing = true;
      frugal.ac_freq = 1;
      frugal.cpu_offload = true;
      frugal.batch_size = 1;
      frugal.grad_accum_steps = 1;
      const int64_t least = plan::estimate_memory(r.shape, frugal).peak_bytes;
      if (c.device.memory_bytes < least)
        throw UsageError("--gpu-memory " + gpu_memory_ + ": " +
                         plan::format_bytes(static_cast<double>(c.device.memory_bytes)) +
                         " is below the least any configuration of " + r.model + " on " +
                         std::to_string(c.world_size()) + " ranks needs (" +
                         plan::format_bytes(static_cast<double>(least)) + ": FULL_SHARD, AC, CPU offload, batch 1)");
    }
    return r;
  });

  if (fit_) {
    auto result = plan::search_fit(in.model, in.shape, in.config);
    for (const auto& candidate : result.candidates) {
      const auto& c = candidate.plan.config;
      std::printf("%-19s ac=%d offload=%d micro=%-3lld accum=%-3lld peak %-10s %s\n",
                  fsdp::to_string(c.strategy).c_str(), c.activation_checkpointing ? 1 : 0, c.cpu_offload ? 1 : 0,
                  static_cast<long long>(c.batch_size), static_cast<long long>(c.grad_accum_steps),
                  plan::format_bytes(static_cast<double>(candidate.plan.memory.peak_bytes)).c_str(),
                  candidate.verdict.c_str());
    }
    if (result.chosen < 0) {
      std::printf("no configuration fits %s per device\n",
                  plan::format_bytes(static_cast<double>(in.config.device.memory_bytes)).c_str());
      return kExitFailedRun;
    }
    const auto& best = result.candidates[static_cast<size_t>(result.chosen)].plan;
    std::printf("\nfastest that fits: %.0f tokens/s, peak %s per device\n%s\n", best.time.tokens_per_s,
                plan::format_bytes(static_cast<double>(best.memory.peak_bytes)).c_str(),
                plan::train_flags(in.model_flags, best.config).c_str());
    if (!json_out_.empty()) write_json(json_out_, plan::plan_json(best));
    return 0;
  }

  const auto p = plan::make_plan(in.model, in.shape, in.config);
  std::fputs(plan::plan_text(p).c_str(), stdout);
  if (!json_out_.empty()) write_json(json_out_, plan::plan_json(p));
  return 0;
}

}  // namespace fsdpp::cli
