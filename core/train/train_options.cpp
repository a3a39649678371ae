#include "core/train/train_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "core/fsdp/sharding.h"
#include "core/models/causal_lm.h"
#include "core/optim/lr_schedule.h"

namespace fsdpp::train {

namespace {

using Kind = TrainOption::Kind;

std::string first_name(const std::string& names) { return names.substr(0, names.find(',')); }

// The whole of `text` as a number by `parse` (std::stoll or std::stod), or
// std::invalid_argument naming the flag and `expected`.
template <typename Parse>
auto parse_number(const std::string& names, const std::string& text, Parse parse, const char* expected) {
  size_t used = 0;
  decltype(parse(text, &used)) value{};
  try {
    value = parse(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw std::invalid_argument(first_name(names) + " '" + text + "': expected " + expected);
  return value;
}

int64_t parse_integer(const std::string& names, const std::string& text) {
  return parse_number(
      names, text, [](const std::string& t, size_t* used) { return std::stoll(t, used); }, "a whole number");
}

double parse_real(const std::string& names, const std::string& text) {
  return parse_number(
      names, text, [](const std::string& t, size_t* used) { return std::stod(t, used); }, "a number");
}

bool parse_switch(const std::string& names, const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  throw std::invalid_argument(first_name(names) + " '" + text + "': expected true or false");
}

TrainOption entry(std::string names, std::string help, Kind kind, std::vector<std::string> choices = {}) {
  TrainOption o;
  o.names = std::move(names);
  o.help = std::move(help);
  o.kind = kind;
  o.choices = std::move(choices);
  return o;
}

// The entries. `field` is a generic lambda giving the TrainConfig member (const or not),
// so that one accessor serves both reading and writing.
template <typename Field>
TrainOption switch_option(std::string names, std::string help, Field field) {
  TrainOption o = entry(std::move(names), std::move(help), Kind::Switch);
  o.read = [names = o.names, field](TrainConfig& c, const std::string& text) { field(c) = parse_switch(names, text); };
  o.write = [field](const TrainConfig& c) { return nlohmann::json(field(c)); };
  return o;
}

template <typename Field>
TrainOption integer_option(std::string names, std::string help, Field field,
                           std::optional<std::pair<double, double>> range = std::nullopt) {
  TrainOption o = entry(std::move(names), std::move(help), Kind::Integer);
  o.range = range;
  o.read = [names = o.names, field](TrainConfig& c, const std::string& text) {
    using T = std::decay_t<decltype(field(c))>;
    field(c) = static_cast<T>(parse_integer(names, text));
  };
  o.write = [field](const TrainConfig& c) { return nlohmann::json(field(c)); };
  return o;
}

template <typename Field>
TrainOption real_option(std::string names, std::string help, Field field) {
  TrainOption o = entry(std::move(names), std::move(help), Kind::Real);
  o.read = [names = o.names, field](TrainConfig& c, const std::string& text) { field(c) = parse_real(names, text); };
  o.write = [field](const TrainConfig& c) { return nlohmann::json(field(c)); };
  return o;
}

template <typename Field>
TrainOption text_option(std::string names, std::string help, Field field, std::vector<std::string> choices = {}) {
  TrainOption o = entry(std::move(names), std::move(help), Kind::Text, std::move(choices));
  o.read = [field](TrainConfig& c, const std::string& text) { field(c) = text; };
  o.write = [field](const TrainConfig& c) { return nlohmann::json(field(c)); };
  return o;
}

// A text option whose field is not a string: `read` and `write` convert.
TrainOption converted_option(std::string names, std::string help, std::vector<std::string> choices,
                             std::function<void(TrainConfig&, const std::string&)> read,
                             std::function<nlohmann::json(const TrainConfig&)> write) {
  TrainOption o = entry(std::move(names), std::move(help), Kind::Text, std::move(choices));
  o.read = std::move(read);
  o.write = std::move(write);
  return o;
}

std::vector<TrainOption> make_options() {
  constexpr double kMaxTokens = static_cast<double>(int64_t{1} << 24);
  std::vector<TrainOption> all;
  // The model.
  all.push_back(text_option(
      "--model", "Hugging Face model folder to fine-tune", [](auto& c) -> auto& { return c.model_dir; }));
  all.push_back(switch_option(
      "--from-scratch", "Initialise a new model (with --model-type, --model-size)",
      [](auto& c) -> auto& { return c.from_scratch; }));
  all.push_back(text_option(
      "--model-type",
      "From scratch: gpt2, opt, llama, mistral, qwen2, qwen3, qwen3_moe, gemma2, gemma3_text, "
      "phi, phi3, mixtral or falcon",
      [](auto& c) -> auto& { return c.model_type; }, models::supported_model_types()));
  all.push_back(text_option(
      "--model-size", "From scratch: preset size (e.g. tiny, mini, 124M; see README)",
      [](auto& c) -> auto& { return c.model_size; }));
  all.push_back(integer_option(
      "--vocab-size", "From scratch: vocabulary size instead of the preset's",
      [](auto& c) -> auto& { return c.vocab_size; }, std::pair{1.0, kMaxTokens}));
  all.push_back(text_option(
      "--tokenizer", "Tokenizer to copy into the exported folder (file or folder)",
      [](auto& c) -> auto& { return c.tokenizer; }));
  // The data.
  all.push_back(text_option(
      "--data", "Training tokens: .tok/.bin file, directory, or comma-separated list",
      [](auto& c) -> auto& { return c.data; }));
  all.push_back(text_option(
      "--eval-data", "Held-out tokens, scored before, every --eval-freq steps, and after",
      [](auto& c) -> auto& { return c.eval_data; }));
  all.push_back(integer_option(
      "--seq-len", "Tokens per window (default: the model's positions)", [](auto& c) -> auto& { return c.seq_len; },
      std::pair{1.0, kMaxTokens}));
  all.push_back(integer_option(
      "--batch-size", "Windows per rank per micro-step", [](auto& c) -> auto& { return c.batch_size; }));
  all.push_back(integer_option(
      "--grad-accum-steps", "Micro-steps per optimizer step", [](auto& c) -> auto& { return c.grad_accum_steps; }));
  all.push_back(switch_option(
      "--no-sync-accum",
      "Reduce gradients once per step, after the last micro-step (FSDP2's "
      "set_requires_gradient_sync): fewer reductions, unsharded gradients held between "
      "micro-steps",
      [](auto& c) -> auto& { return c.no_sync_accum; }));
  // Optimisation.
  all.push_back(real_option(
      "--lr,--max-lr", "Peak learning rate", [](auto& c) -> auto& { return c.adamw.lr; }));
  all.push_back(real_option(
      "--min-lr", "Learning rate at the end of the decay", [](auto& c) -> auto& { return c.min_lr; }));
  all.push_back(integer_option(
      "--warmup-steps", "Linear warmup steps", [](auto& c) -> auto& { return c.warmup_steps; }));
  all.push_back(converted_option(
      "--lr-schedule", "cosine, linear or constant", {"cosine", "linear", "constant"},
      [](TrainConfig& c, const std::string& text) { c.lr_decay = optim::parse_lr_decay(text); },
      [](const TrainConfig& c) { return nlohmann::json(optim::to_string(c.lr_decay)); }));
  all.push_back(integer_option(
      "--max-steps", "Optimizer steps", [](auto& c) -> auto& { return c.max_steps; }));
  all.push_back(real_option(
      "--num-epochs", "Epochs (instead of --max-steps)", [](auto& c) -> auto& { return c.num_epochs; }));
  all.push_back(real_option(
      "--weight-decay", "AdamW weight decay for 2-D+ parameters",
      [](auto& c) -> auto& { return c.adamw.weight_decay; }));
  all.push_back(real_option(
      "--adam-beta1", "AdamW beta1", [](auto& c) -> auto& { return c.adamw.beta1; }));
  all.push_back(real_option(
      "--adam-beta2", "AdamW beta2", [](auto& c) -> auto& { return c.adamw.beta2; }));
  all.push_back(real_option(
      "--adam-eps", "AdamW epsilon", [](auto& c) -> auto& { return c.adamw.eps; }));
  all.push_back(real_option(
      "--grad-clip", "Clip the global gradient norm (--norm-type) to this (0: off)",
      [](auto& c) -> auto& { return c.grad_clip; }));
  TrainOption norm = real_option(
      "--norm-type",
      "Norm of the gradient that --grad-clip bounds and grad_norm logs: p > 0, or inf "
      "(clip_grad_norm_'s norm_type)",
      [](auto& c) -> auto& { return c.norm_type; });
  norm.read = [](TrainConfig& c, const std::string& text) {
    c.norm_type = parse_real("--norm-type", text);
    if (!(c.norm_type > 0)) throw std::invalid_argument("--norm-type '" + text + "': expected p > 0, or inf");
  };
  norm.write = [](const TrainConfig& c) {  // JSON has no infinity
    return std::isinf(c.norm_type) ? nlohmann::json("inf") : nlohmann::json(c.norm_type);
  };
  all.push_back(std::move(norm));
  // Parallelism and precision.
  all.push_back(converted_option(
      "--strategy", "full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2", {},
      [](TrainConfig& c, const std::string& text) { c.fsdp.strategy = fsdp::parse_strategy(text); },
      [](const TrainConfig& c) { return nlohmann::json(fsdp::to_string(c.fsdp.strategy)); }));
  all.push_back(converted_option(
      "--backward-prefetch", "pre, post or none", {"pre", "post", "none"},
      [](TrainConfig& c, const std::string& text) {
        c.fsdp.backward_prefetch = text == "none"   ? fsdp::BackwardPrefetch::None
                                   : text == "post" ? fsdp::BackwardPrefetch::Post
                                                    : fsdp::BackwardPrefetch::Pre;
      },
      [](const TrainConfig& c) {
        const auto p = c.fsdp.backward_prefetch;
        return nlohmann::json(p == fsdp::BackwardPrefetch::None   ? "none"
                              : p == fsdp::BackwardPrefetch::Post ? "post"
                                                                  : "pre");
      }));
  TrainOption no_forward_prefetch =
      entry("--no-forward-prefetch", "Do not prefetch the next unit's all-gather in forward", Kind::Switch);
  no_forward_prefetch.read = [](TrainConfig& c, const std::string& text) {
    c.fsdp.forward_prefetch = !parse_switch("--no-forward-prefetch", text);
  };
  no_forward_prefetch.write = [](const TrainConfig& c) { return nlohmann::json(!c.fsdp.forward_prefetch); };
  all.push_back(std::move(no_forward_prefetch));
  all.push_back(integer_option(
      "--hybrid-shard-size",
      "Ranks per shard group for hybrid strategies (default: a node's ranks on several "
      "nodes; on one, the largest divisor of the world size below it)",
      [](auto& c) -> auto& { return c.fsdp.hybrid_shard_size; }));
  all.push_back(text_option(
      "--wrap-policy", "block (one unit per transformer block), size:N, or none",
      [](auto& c) -> auto& { return c.wrap_policy; }));
  all.push_back(text_option(
      "--mixed-precision", "fp32, bf16 or fp16", [](auto& c) -> auto& { return c.mixed_precision; }));
  all.push_back(switch_option(
      "--activation-checkpointing", "Recompute blocks' activations in backward",
      [](auto& c) -> auto& { return c.activation_checkpointing; }));
  all.push_back(integer_option(
      "--ac-freq", "With --activation-checkpointing: every k-th block (1: all)",
      [](auto& c) -> auto& { return c.ac_freq; }));
  all.push_back(switch_option(
      "--cpu-offload", "Keep shards and optimizer state in host memory",
      [](auto& c) -> auto& { return c.cpu_offload; }));
  all.push_back(converted_option(
      "--no-reshard-after-forward",
      "Units (comma-separated indices in module order, -1: the last) that stay unsharded from their forward to "
      "their backward (FSDP2's per-unit reshard_after_forward=False)",
      {},
      [](TrainConfig& c, const std::string& text) {
        c.no_reshard_after_forward = parse_unit_indices(text, "--no-reshard-after-forward");
      },
      [](const TrainConfig& c) { return nlohmann::json(c.no_reshard_after_forward); }));
  all.push_back(integer_option(
      "--reshard-after-forward-group-size",
      "After its forward each other unit keeps 1/K of its gathered parameters and "
      "all-gathers the rest in backward over K ranks of its shard group (FSDP2's "
      "reshard_after_forward=K, ZeRO++ hpZ; 0: off)",
      [](auto& c) -> auto& { return c.reshard_after_forward_group_size; }));
  all.push_back(integer_option(
      "--explicit-prefetch",
      "Each unit prefetches the next N units in forward and the previous N in backward "
      "(FSDP2's set_modules_to_forward_prefetch/_backward_prefetch; 0: implicit prefetch)",
      [](auto& c) -> auto& { return c.explicit_prefetch; }));
  TrainOption divide_factor = entry("--gradient-divide-factor",
                                    "Reduce gradients to the ranks' sum divided by this (FSDP2's "
                                    "set_gradient_divide_factor; default: their average)",
                                    Kind::Real);
  divide_factor.read = [](TrainConfig& c, const std::string& text) {
    c.fsdp.gradient_divide_factor = parse_real("--gradient-divide-factor", text);
  };
  divide_factor.write = [](const TrainConfig& c) {
    return c.fsdp.gradient_divide_factor ? nlohmann::json(*c.fsdp.gradient_divide_factor) : nlohmann::json();
  };
  all.push_back(std::move(divide_factor));
  all.push_back(switch_option(
      "--sync-module-states", "Rank 0 loads the full model and broadcasts it (default: each rank reads only its rows)",
      [](auto& c) -> auto& { return c.sync_module_states; }));
  all.push_back(text_option(
      "--device",
      "cpu, cuda (rank r on GPU local_rank % GPUs) or cuda:N (default: cuda where there is a "
      "GPU, else cpu, as bench-step)",
      [](auto& c) -> auto& { return c.device; }));
  all.push_back(switch_option(
      "--deterministic",
      "Deterministic kernels, one thread per rank, world-size-invariant reduction: identical "
      "bits on any number of ranks (same --batch-size and global batch)",
      [](auto& c) -> auto& { return c.deterministic; }));
  TrainOption no_shuffle = entry("--no-shuffle", "Windows in file order (see README: data order)", Kind::Switch);
  no_shuffle.json_key = "shuffle";  // recorded as the order it gives
  no_shuffle.read = [](TrainConfig& c, const std::string& text) { c.shuffle = !parse_switch("--no-shuffle", text); };
  no_shuffle.write = [](const TrainConfig& c) { return nlohmann::json(c.shuffle); };
  all.push_back(std::move(no_shuffle));
  all.push_back(integer_option(
      "--eval-max-windows", "Score at most this many eval windows (0: all)",
      [](auto& c) -> auto& { return c.eval_max_windows; }));
  // Output.
  all.push_back(text_option(
      "--save-dir", "Parent of the run directory", [](auto& c) -> auto& { return c.save_dir; }));
  all.push_back(text_option(
      "--experiment-name", "Run directory name: <save-dir>/<experiment-name>",
      [](auto& c) -> auto& { return c.experiment_name; }));
  all.push_back(integer_option(
      "--ckpt-freq", "Write a sharded checkpoint every N steps (0: only at the end)",
      [](auto& c) -> auto& { return c.ckpt_freq; }));
  all.push_back(integer_option(
      "--keep-last", "Complete checkpoints to keep (0: all)", [](auto& c) -> auto& { return c.keep_last; }));
  all.push_back(switch_option(
      "--async-checkpoint", "Write checkpoints in the background: training waits only for a host copy of the shards",
      [](auto& c) -> auto& { return c.async_checkpoint; }));
  all.push_back(text_option(
      "--resume",
      "auto (continue from the newest complete checkpoint of the run, if any), never, or a checkpoint folder",
      [](auto& c) -> auto& { return c.resume; }));
  all.push_back(switch_option(
      "--loss-scaling", "Dynamic loss scaling (ShardedGradScaler) also without fp16",
      [](auto& c) -> auto& { return c.loss_scaling; }));
  all.push_back(integer_option(
      "--loss-scale-growth-interval", "Overflow-free steps before the loss scale doubles (PyTorch: 2000)",
      [](auto& c) -> auto& { return c.loss_scale_growth_interval; }));
  all.push_back(integer_option(
      "--log-freq", "Print a log line every N steps", [](auto& c) -> auto& { return c.log_freq; }));
  all.push_back(integer_option(
      "--eval-freq", "Evaluate every N steps (0: before and after only)",
      [](auto& c) -> auto& { return c.eval_freq; }));
  all.push_back(integer_option(
      "--seed", "Seed of initialisation and data order", [](auto& c) -> auto& { return c.seed; }));
  return all;
}

}  // namespace

std::string TrainOption::name() const { return first_name(names); }

std::string TrainOption::key() const {
  std::string k = name().substr(2);
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

const std::vector<TrainOption>& train_options() {
  static const std::vector<TrainOption> options = make_options();
  return options;
}

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

}  // namespace fsdpp::train
