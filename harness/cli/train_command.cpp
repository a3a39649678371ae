#include "harness/cli/train_command.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>

#include "core/fsdp/sharding.h"
#include "core/io/yaml_json.h"
#include "core/models/causal_lm.h"
#include "core/runtime/device.h"
#include "core/train/trainer.h"
#include "harness/cli/parse_only.h"
#include "harness/cli/usage_error.h"

namespace fsdpp::cli {

std::vector<int64_t> parse_unit_indices(const std::string& spec, const std::string& flag) {
  std::vector<int64_t> indices;
  if (spec.empty()) return indices;
  for (size_t start = 0;;) {
    const size_t comma = spec.find(',', start);
    const std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t digits_from = !item.empty() && item[0] == '-' ? 1 : 0;
    if (item.size() <= digits_from || item.size() > 10 ||
        item.find_first_not_of("0123456789", digits_from) != std::string::npos)
      throw std::invalid_argument(flag + " '" + spec +
                                  "': expected comma-separated unit indices (0: the first unit, -1: the last)");
    indices.push_back(std::stoll(item));
    if (comma == std::string::npos) return indices;
    start = comma + 1;
  }
}

namespace {

// The resume tests' crash (FSDPP_KILL_AFTER_STEP=N): after step N, its checkpoint (if one
// was due) committed, asynchronous or not, every rank dies by SIGKILL, at a known point.
class KillAfterStep final : public train::StepObserver {
 public:
  explicit KillAfterStep(int64_t step) : step_(step) {}
  void after_step(int64_t steps_done, const std::function<void()>& settle) override {
    if (steps_done != step_) return;
    settle();
    ::raise(SIGKILL);
  }

 private:
  int64_t step_;
};

}  // namespace

void TrainCommand::add_to(CLI::App& app) {
  auto* t = command_ = app.add_subcommand("train", "Train or fine-tune a causal LM with FSDP on N ranks");
  // A --config file's options come first on the command line; later flags win.
  t->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& c = config_;
  add_distributed_flags(*t, dist_);
  t->add_option("--config", config_file_, "JSON or YAML file with any of these options (flags override it)");
  t->add_option("--model", c.model_dir, "Hugging Face model folder to fine-tune");
  t->add_flag("--from-scratch", c.from_scratch, "Initialise a new model (with --model-type, --model-size)");
  t->add_option("--model-type", c.model_type,
                "From scratch: gpt2, opt, llama, mistral, qwen2, qwen3, qwen3_moe, gemma2, gemma3_text, phi, phi3, "
                "mixtral or falcon")
      ->check(CLI::IsMember(models::supported_model_types()));
  t->add_option("--model-size", c.model_size, "From scratch: preset size (e.g. tiny, mini, 124M; see README)");
  t->add_option("--vocab-size", c.vocab_size, "From scratch: vocabulary size instead of the preset's")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  t->add_option("--tokenizer", c.tokenizer, "Tokenizer to copy into the exported folder (file or folder)");
  t->add_option("--data", c.data, "Training tokens: .tok/.bin file, directory, or comma-separated list");
  t->add_option("--eval-data", c.eval_data, "Held-out tokens, scored before, every --eval-freq steps, and after");
  t->add_option("--seq-len", c.seq_len, "Tokens per window (default: the model's positions)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  t->add_option("--batch-size", c.batch_size, "Windows per rank per micro-step");
  t->add_option("--grad-accum-steps", c.grad_accum_steps, "Micro-steps per optimizer step");
  t->add_flag("--no-sync-accum", c.no_sync_accum,
              "Reduce gradients once per step, after the last micro-step (FSDP2's set_requires_gradient_sync): "
              "fewer reductions, unsharded gradients held between micro-steps");
  t->add_option("--lr,--max-lr", c.adamw.lr, "Peak learning rate");
  t->add_option("--min-lr", c.min_lr, "Learning rate at the end of the decay");
  t->add_option("--warmup-steps", c.warmup_steps, "Linear warmup steps");
  t->add_option("--lr-schedule", lr_schedule_, "cosine, linear or constant")
      ->check(CLI::IsMember({"cosine", "linear", "constant"}));
  t->add_option("--max-steps", c.max_steps, "Optimizer steps");
  t->add_option("--num-epochs", c.num_epochs, "Epochs (instead of --max-steps)");
  t->add_option("--weight-decay", c.adamw.weight_decay, "AdamW weight decay for 2-D+ parameters");
  t->add_option("--adam-beta1", c.adamw.beta1, "AdamW beta1");
  t->add_option("--adam-beta2", c.adamw.beta2, "AdamW beta2");
  t->add_option("--adam-eps", c.adamw.eps, "AdamW epsilon");
  t->add_option("--grad-clip", c.grad_clip, "Clip the global gradient 2-norm to this (0: off)");
  t->add_option("--strategy", strategy_, "full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2");
  t->add_option("--backward-prefetch", backward_prefetch_, "pre, post or none")
      ->check(CLI::IsMember({"pre", "post", "none"}));
  t->add_flag("--no-forward-prefetch", no_forward_prefetch_, "Do not prefetch the next unit's all-gather in forward");
  t->add_option("--hybrid-shard-size", c.fsdp.hybrid_shard_size,
                "Ranks per shard group for hybrid strategies (default: a node's ranks on several nodes; on one, "
                "the largest divisor of the world size below it)");
  t->add_option("--wrap-policy", c.wrap_policy, "block (one unit per transformer block), size:N, or none");
  t->add_option("--mixed-precision", c.mixed_precision, "fp32, bf16 or fp16");
  t->add_flag("--activation-checkpointing", c.activation_checkpointing, "Recompute blocks' activations in backward");
  t->add_option("--ac-freq", c.ac_freq, "With --activation-checkpointing: every k-th block (1: all)");
  t->add_flag("--cpu-offload", c.cpu_offload, "Keep shards and optimizer state in host memory");
  t->add_option("--no-reshard-after-forward", no_reshard_after_forward_,
                "Units (comma-separated indices in module order, -1: the last) that stay unsharded from their "
                "forward to their backward (FSDP2's per-unit reshard_after_forward=False)");
  t->add_option("--reshard-after-forward-group-size", c.reshard_after_forward_group_size,
                "After its forward each other unit keeps 1/K of its gathered parameters and all-gathers the rest in "
                "backward over K ranks of its shard group (FSDP2's reshard_after_forward=K, ZeRO++ hpZ; 0: off)");
  t->add_option("--explicit-prefetch", c.explicit_prefetch,
                "Each unit prefetches the next N units in forward and the previous N in backward (FSDP2's "
                "set_modules_to_forward_prefetch/_backward_prefetch; 0: implicit prefetch)");
  divide_factor_option_ = t->add_option("--gradient-divide-factor", divide_factor_,
                                        "Reduce gradients to the ranks' sum divided by this (FSDP2's "
                                        "set_gradient_divide_factor; default: their average)");
  t->add_flag("--sync-module-states", c.sync_module_states,
              "Rank 0 loads the full model and broadcasts it (default: each rank reads only its rows)");
  device_option_ = t->add_option("--device", c.device,
                                 "cpu, cuda (rank r on GPU local_rank % GPUs) or cuda:N (default: cuda where there "
                                 "is a GPU, else cpu, as bench-step)");
  t->add_flag("--deterministic", c.deterministic,
              "Deterministic kernels, one thread per rank, world-size-invariant reduction: identical bits on any "
              "number of ranks (same --batch-size and global batch)");
  t->add_flag("--no-shuffle", no_shuffle_, "Windows in file order (see README: data order)");
  t->add_option("--eval-max-windows", c.eval_max_windows, "Score at most this many eval windows (0: all)");
  t->add_option("--save-dir", c.save_dir, "Parent of the run directory");
  t->add_option("--experiment-name", c.experiment_name, "Run directory name: <save-dir>/<experiment-name>");
  t->add_option("--ckpt-freq", c.ckpt_freq, "Write a sharded checkpoint every N steps (0: only at the end)");
  t->add_option("--keep-last", c.keep_last, "Complete checkpoints to keep (0: all)");
  t->add_flag("--async-checkpoint", c.async_checkpoint,
              "Write checkpoints in the background: training waits only for a host copy of the shards");
  t->add_option(
      "--resume", c.resume,
      "auto (continue from the newest complete checkpoint of the run, if any), never, or a checkpoint folder");
  t->add_flag("--loss-scaling", c.loss_scaling, "Dynamic loss scaling (ShardedGradScaler) also without fp16");
  t->add_option("--loss-scale-growth-interval", c.loss_scale_growth_interval,
                "Overflow-free steps before the loss scale doubles (PyTorch: 2000)");
  t->add_option("--log-freq", c.log_freq, "Print a log line every N steps");
  t->add_option("--eval-freq", c.eval_freq, "Evaluate every N steps (0: before and after only)");
  t->add_option("--seed", c.seed, "Seed of initialisation and data order");
}

std::vector<std::string> TrainCommand::expand_config(const std::vector<std::string>& argv) const {
  if (argv.size() < 2 || argv[1] != "train") return argv;
  std::string file;
  for (size_t i = 2; i < argv.size(); ++i) {
    if (argv[i] == "--config" && i + 1 < argv.size()) file = argv[i + 1];
    if (argv[i].rfind("--config=", 0) == 0) file = argv[i].substr(9);
  }
  if (file.empty()) return argv;
  if (parse_only() && !std::filesystem::exists(file)) return argv;  // a placeholder such as <file>
  auto json = io::load_json_or_yaml_file(file);
  if (!json.is_object()) throw std::invalid_argument(file + ": expected a mapping of option names to values");
  std::vector<std::string> inserted;
  for (const auto& [key, value] : json.items()) {
    std::string name = "--" + key;
    std::replace(name.begin(), name.end(), '_', '-');
    const CLI::Option* option = command_->get_option_no_throw(name);
    if (option == nullptr || name == "--config")
      throw std::invalid_argument(file + ": unknown option '" + key + "' (expected the name of a train flag)");
    if (value.is_boolean()) {
      if (option->get_expected_min() != 0)
        throw std::invalid_argument(file + ": option '" + key + "' takes a value, not true/false");
      inserted.push_back(name + "=" + (value.get<bool>() ? "true" : "false"));
    } else if (value.is_string()) {
      inserted.push_back(name);
      inserted.push_back(value.get<std::string>());
    } else if (value.is_number()) {
      inserted.push_back(name);
      inserted.push_back(value.is_number_float() ? nlohmann::json(value).dump() : std::to_string(value.get<int64_t>()));
    } else {
      throw std::invalid_argument(file + ": option '" + key + "' must be a string, number or boolean");
    }
  }
  std::vector<std::string> out(argv.begin(), argv.begin() + 2);
  out.insert(out.end(), inserted.begin(), inserted.end());
  out.insert(out.end(), argv.begin() + 2, argv.end());
  return out;
}

const train::TrainConfig& TrainCommand::finish_config() {
  config_.shuffle = !no_shuffle_;
  config_.lr_decay = optim::parse_lr_decay(lr_schedule_);
  config_.fsdp.strategy = fsdp::parse_strategy(strategy_);
  config_.fsdp.forward_prefetch = !no_forward_prefetch_;
  config_.no_reshard_after_forward = parse_unit_indices(no_reshard_after_forward_, "--no-reshard-after-forward");
  config_.fsdp.gradient_divide_factor.reset();
  if (divide_factor_option_->count() > 0) config_.fsdp.gradient_divide_factor = divide_factor_;
  config_.fsdp.backward_prefetch = backward_prefetch_ == "none"   ? fsdp::BackwardPrefetch::None
                                   : backward_prefetch_ == "post" ? fsdp::BackwardPrefetch::Post
                                                                  : fsdp::BackwardPrefetch::Pre;
  return config_;
}

void TrainCommand::check() {
  finish_config();
  // The options of a placeholder --config are unknown: what validate requires may be there.
  if (parse_only() && !config_file_.empty() && !std::filesystem::exists(config_file_)) return;
  config_.validate();
}

bool TrainCommand::parsed() const { return command_ != nullptr && command_->parsed(); }

int TrainCommand::run(const std::vector<std::string>& argv) {
  finish_config();
  // The same default as bench-step's: the machine's accelerator if it has one.
  if (device_option_->count() == 0) config_.device = runtime::cuda_available() ? "cuda" : "cpu";
  // Reductions inside kernels (bias gradients, LayerNorm) may depend on the intra-op
  // thread count, which defaults to cores / ranks: one thread per rank on any world size.
  if (config_.deterministic) dist_.threads = 1;
  // Before launching ranks: bad input is one line from the launcher, and exit 2. A rank
  // process hands what it resolved to train::train, which reads none of it again.
  const train::RunInputs inputs = [&] {
    try {
      if (dist_.nproc > 0) config_.validate_for_world(dist_.nproc);  // one node: the world is known here
      return train::preflight(config_);
    } catch (const std::exception& e) {
      throw UsageError(e.what());
    }
  }();
  // The resume tests' crash point, read here once.
  std::optional<KillAfterStep> kill;
  if (const char* kill_after = std::getenv("FSDPP_KILL_AFTER_STEP")) kill.emplace(std::atoll(kill_after));
  return run_distributed(argv, dist_, [&](comm::Communicator& comm, const comm::WorldSpec& world) {
    train::TrainConfig config = config_;
    // On several nodes, hybrid strategies shard inside a node and replicate across nodes
    // (PyTorch's HYBRID_SHARD default) unless --hybrid-shard-size says otherwise.
    using fsdp::ShardingStrategy;
    const bool hybrid = config.fsdp.strategy == ShardingStrategy::HybridShard ||
                        config.fsdp.strategy == ShardingStrategy::HybridShardZero2;
    if (hybrid && config.fsdp.hybrid_shard_size == 0 && world.local_world_size < world.world_size &&
        world.world_size % world.local_world_size == 0)
      config.fsdp.hybrid_shard_size = world.local_world_size;
    auto result = train::train(comm, config, inputs, world.local_rank, kill ? &*kill : nullptr);
    if (comm.rank() == 0) {
      const auto steps = static_cast<long long>(result.steps), start = static_cast<long long>(result.start_step);
      if (start == 0)
        std::printf("summary: %lld steps, loss %.4f -> %.4f", steps, result.first_loss, result.last_loss);
      else if (start < steps)  // a resumed run saw only its own steps' losses
        std::printf("summary: steps %lld-%lld of %lld (resumed after step %lld), loss %.4f -> %.4f", start + 1, steps,
                    steps, start, result.first_loss, result.last_loss);
      else
        std::printf("summary: nothing to train: the checkpoint is at step %lld of %lld", start, steps);
      if (result.eval_before && result.eval_after)
        std::printf(", eval perplexity %.2f -> %.2f", result.eval_before->perplexity, result.eval_after->perplexity);
      std::printf(", %.0f tokens/s\n", result.mean_tokens_per_s);
      std::fflush(stdout);
    }
    return 0;
  });
}

}  // namespace fsdpp::cli
