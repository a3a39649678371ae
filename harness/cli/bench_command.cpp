#include "harness/cli/bench_command.h"

#include <cstdio>

#include "core/io/atomic_file.h"

namespace fsdpp::cli {

void BenchCommand::add_to(CLI::App& app) {
  command_ = app.add_subcommand("bench-step", "Time whole training steps of one model/strategy cell (tokens/s, MFU, memory)");
  add_distributed_flags(*command_, dist_);
  auto& c = config_;
  command_->add_option("--model-type", c.model_type, "gpt2, opt or llama")->check(CLI::IsMember({"gpt2", "opt", "llama"}));
  command_->add_option("--model-size", c.model_size, "A from-scratch preset size of that family (e.g. 124M, 1B)");
  command_->add_option("--vocab-size", c.vocab_size, "Override the preset's vocabulary (0: keep)")->check(CLI::NonNegativeNumber);
  command_->add_option("--batch-size", c.batch_size, "Sequences per rank per step")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  command_->add_option("--seq-len", c.seq_len, "Tokens per sequence")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  command_->add_option("--warmup", c.warmup_steps, "Untimed steps first")->check(CLI::Range(0, 1000));
  command_->add_option("--steps", c.steps, "Timed steps")->check(CLI::Range(1, 100000));
  command_->add_option("--device", c.device, "cpu, cuda or cuda:N");
  command_->add_option("--mixed-precision", c.mixed_precision, "Compute dtype: fp32, bf16 or fp16 (fp32 masters and reduce)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  command_->add_option("--strategy", strategy_, "full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2");
  command_->add_flag("--activation-checkpointing", c.activation_checkpointing, "Checkpoint every transformer block");
  command_->add_flag("--cpu-offload", c.cpu_offload, "Shards, gradients and optimizer state in host memory");
  command_->add_flag("--no-prefetch", no_prefetch_, "Disable forward and backward prefetching");
  command_->add_option("--seed", c.seed, "Initial weights and data");
  command_->add_option("--out", out_, "Write the cell's JSON here (rank 0)");
}

int BenchCommand::run_parsed(const std::vector<std::string>& argv) {
  if (command_ == nullptr || !command_->parsed()) return -1;
  config_.strategy = fsdp::parse_strategy(strategy_);
  config_.prefetch = !no_prefetch_;
  return run_distributed(argv, dist_, [&](comm::Communicator& comm, const comm::WorldSpec& world) {
    auto cell = harness::run_step_bench(comm, world.local_rank, config_);
    if (comm.rank() == 0) {
      std::printf("bench-step: %s %s, %s, %d ranks, %s%s: %.1f ms/step (median), %.0f tokens/s, MFU %.1f%%, peak %.2f GB\n",
                  config_.model_type.c_str(), config_.model_size.c_str(), strategy_.c_str(), comm.size(),
                  config_.mixed_precision.c_str(), config_.activation_checkpointing ? ", AC" : "",
                  cell["step_ms_median"].get<double>(), cell["tokens_per_s"].get<double>(),
                  100 * cell["mfu"].get<double>(),
                  cell["memory_bytes"]["peak_allocated"].get<int64_t>() / 1e9);
      std::fflush(stdout);
      if (!out_.empty()) io::write_file_atomic(out_, cell.dump(2) + "\n");
    }
    return 0;
  });
}

}  // namespace fsdpp::cli
