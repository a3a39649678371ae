#include "core/train/train_config.h"

#include <stdexcept>

#include "core/fsdp/sharding.h"
#include "core/train/train_options.h"

namespace fsdpp::train {

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

}  // namespace

void TrainConfig::validate() const {
  require(from_scratch || !model_dir.empty(),
          "give --model DIR (a Hugging Face folder) or --from-scratch --model-size SIZE");
  require(!(from_scratch && !model_dir.empty()), "--model and --from-scratch conflict: choose one");
  require(!from_scratch || !model_size.empty(), "--from-scratch needs --model-size");
  require(from_scratch || model_size.empty(), "--model-size is only meaningful with --from-scratch");
  require(from_scratch || vocab_size == 0, "--vocab-size is only meaningful with --from-scratch");
  require(!data.empty(), "--data is required (a token file, a directory of them, or a comma-separated list)");
  require(seq_len >= 0, "--seq-len must be positive");
  require(batch_size >= 1, "--batch-size must be at least 1 (windows per rank per micro-step)");
  require(grad_accum_steps >= 1, "--grad-accum-steps must be at least 1");
  require(reshard_after_forward_group_size == 0 || reshard_after_forward_group_size >= 2,
          "--reshard-after-forward-group-size must be 0 (reshard fully) or at least 2, not " +
              std::to_string(reshard_after_forward_group_size));
  require(reshard_after_forward_group_size == 0 || fsdp::reshards_after_forward(fsdp.strategy),
          "--reshard-after-forward-group-size: " + fsdp::to_string(fsdp.strategy) +
              " never reshards after forward (only full_shard and hybrid_shard do)");
  require(eval_max_windows >= 0, "--eval-max-windows must be >= 0");
  require(adamw.lr > 0, "--lr must be > 0");
  require(min_lr >= 0 && min_lr <= adamw.lr, "--min-lr must be in [0, --lr]");
  require(warmup_steps >= 0, "--warmup-steps must be >= 0");
  require(adamw.beta1 >= 0 && adamw.beta1 < 1, "--adam-beta1 must be in [0, 1)");
  require(adamw.beta2 >= 0 && adamw.beta2 < 1, "--adam-beta2 must be in [0, 1)");
  require(adamw.eps > 0, "--adam-eps must be > 0");
  require(adamw.weight_decay >= 0, "--weight-decay must be >= 0");
  require((max_steps > 0) != (num_epochs > 0),
          max_steps > 0 ? "--max-steps and --num-epochs conflict: choose one" : "give --max-steps N or --num-epochs E");
  require(max_steps >= 0 && num_epochs >= 0, "--max-steps and --num-epochs must be positive");
  require(grad_clip >= 0, "--grad-clip must be >= 0 (0: off)");
  require(wrap_policy == "block" || wrap_policy == "none" ||
              (wrap_policy.rfind("size:", 0) == 0 && wrap_policy.size() > 5 &&
               wrap_policy.find_first_not_of("0123456789", 5) == std::string::npos),
          "--wrap-policy '" + wrap_policy + "': expected block, none or size:N (N = minimum parameters per unit)");
  require(mixed_precision == "fp32" || mixed_precision == "bf16" || mixed_precision == "fp16",
          "--mixed-precision '" + mixed_precision + "': expected fp32, bf16 or fp16");
  require(device == "cpu" || device.rfind("cuda", 0) == 0, "--device '" + device + "': expected cpu, cuda or cuda:N");
  require(no_reshard_after_forward.empty() || fsdp::reshards_after_forward(fsdp.strategy),
          "--no-reshard-after-forward: " + fsdp::to_string(fsdp.strategy) +
              " never reshards after forward (only full_shard and hybrid_shard do)");
  require(explicit_prefetch >= 0, "--explicit-prefetch must be >= 0 (0: implicit prefetch)");
  require(explicit_prefetch == 0 || fsdp.strategy != fsdp::ShardingStrategy::NoShard,
          "--explicit-prefetch: no_shard has no all-gathers to prefetch");
  require(explicit_prefetch == 0 || (fsdp.forward_prefetch && fsdp.backward_prefetch == fsdp::BackwardPrefetch::Pre),
          "--explicit-prefetch conflicts with --no-forward-prefetch and --backward-prefetch post/none: it "
          "replaces the implicit prefetch");
  require(!fsdp.gradient_divide_factor || *fsdp.gradient_divide_factor > 0, "--gradient-divide-factor must be > 0");
  require(!(fsdp.gradient_divide_factor && deterministic),
          "--gradient-divide-factor and --deterministic conflict: the world-size-invariant order folds the "
          "ranks' gradients in a fixed order and divides by the world size itself");
  require(ac_freq >= 1, "--ac-freq must be at least 1 (checkpoint every k-th block)");
  require(!experiment_name.empty() && experiment_name.find('/') == std::string::npos && experiment_name != "." &&
              experiment_name != "..",
          "--experiment-name '" + experiment_name + "': expected a plain directory name");
  require(loss_scale_growth_interval >= 1, "--loss-scale-growth-interval must be >= 1");
  require(keep_last >= 0, "--keep-last must be >= 0 (0: keep every checkpoint)");
  require(!resume.empty(), "--resume: expected auto, never or a checkpoint folder");
  require(ckpt_freq >= 0 && log_freq >= 1 && eval_freq >= 0,
          "--ckpt-freq and --eval-freq must be >= 0, --log-freq >= 1");
}

void TrainConfig::validate_for_world(int world_size) const {
  const int k = reshard_after_forward_group_size;
  if (k == 0) return;
  const int shard = fsdp::shard_group_size(fsdp.strategy, world_size, fsdp.hybrid_shard_size);
  const auto problem = fsdp::post_forward_group_size_problem(k, shard);
  require(problem.empty(), "--reshard-after-forward-group-size " + std::to_string(k) + " " + problem + " (" +
                               std::to_string(world_size) + " ranks, " + fsdp::to_string(fsdp.strategy) + ")");
}

std::vector<std::pair<std::string, const torch::nn::Module*>> units_kept_unsharded(const fsdp::ShardedModel& sharded,
                                                                                   const TrainConfig& c) {
  const auto modules = sharded.wrapped_modules();
  const auto units = static_cast<int64_t>(modules.size());
  std::vector<std::pair<std::string, const torch::nn::Module*>> kept;
  for (int64_t index : c.no_reshard_after_forward) {
    const auto i = fsdp::unit_position(index, units);
    if (!i)
      throw std::invalid_argument(
          "--no-reshard-after-forward " + std::to_string(index) + ": --wrap-policy " + c.wrap_policy + " made " +
          (units == 0 ? std::string("no unit besides the root")
                      : std::to_string(units) + " unit(s) besides the root (indices 0 to " + std::to_string(units - 1) +
                            ", or -1 to -" + std::to_string(units) + " from the end)"));
    kept.push_back(modules[static_cast<size_t>(*i)]);
  }
  return kept;
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& option : train_options())
    out[option.json_key.empty() ? option.key() : option.json_key] = option.write(*this);
  return out;
}

}  // namespace fsdpp::train
