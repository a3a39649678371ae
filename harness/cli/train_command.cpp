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
  add_distributed_flags(*t, dist_);
  t->add_option("--config", config_file_, "JSON or YAML file with any of these options (flags override it)");
  // Every option from its one declaration (core/train/train_options.h): the value as text,
  // read into the TrainConfig by finish_config().
  given_.clear();
  given_.reserve(train::train_options().size());
  for (const auto& option : train::train_options()) {
    given_.push_back(Given{&option, nullptr, std::string(), false});
    Given& g = given_.back();
    if (option.kind == train::TrainOption::Kind::Switch) {
      g.cli = t->add_flag(option.names, g.on, option.help);
      continue;
    }
    g.cli = t->add_option(option.names, g.text, option.help);
    // The default, as --help shows it: TrainConfig's, written by the option's entry.
    if (const auto fallback = option.write(train::TrainConfig{}); !fallback.is_null() && !fallback.empty())
      g.cli->default_str(fallback.is_string() ? fallback.get<std::string>() : fallback.dump());
    if (option.kind == train::TrainOption::Kind::Integer) g.cli->type_name("INT");
    if (option.kind == train::TrainOption::Kind::Real) g.cli->type_name("FLOAT");
    if (!option.choices.empty()) g.cli->check(CLI::IsMember(option.choices));
    if (option.range && option.kind == train::TrainOption::Kind::Integer)
      g.cli->check(CLI::Range(static_cast<int64_t>(option.range->first), static_cast<int64_t>(option.range->second)));
    else if (option.range)
      g.cli->check(CLI::Range(option.range->first, option.range->second));
  }
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
  config_ = train::TrainConfig{};
  for (const auto& g : given_)
    if (g.cli->count() > 0)
      g.option->read(config_, g.option->kind == train::TrainOption::Kind::Switch ? (g.on ? "true" : "false") : g.text);
  return config_;
}

bool TrainCommand::given(const std::string& name) const {
  for (const auto& g : given_)
    if (g.option->name() == name) return g.cli->count() > 0;
  return false;
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
  if (!given("--device")) config_.device = runtime::cuda_available() ? "cuda" : "cpu";
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
