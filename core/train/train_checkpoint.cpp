#include "core/train/train_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdio>
#include <stdexcept>
#include <utility>

#include "core/checkpoint/checkpoint_scan.h"
#include "core/checkpoint/fsdp_state.h"
#include "core/checkpoint/sha256.h"
#include "core/runtime/stopwatch.h"

namespace fsdpp::train {

namespace {

constexpr const char* kFormat = "fsdpp.train-state";
constexpr int kVersion = 1;
constexpr const char* kRngTensor = "rng/cpu";

std::string model_config_sha256(const nlohmann::json& model_config) {
  checkpoint::Sha256 hash;
  const std::string text = model_config.dump();
  hash.update(text.data(), text.size());
  return hash.hex_digest();
}

at::Tensor cpu_rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }

}  // namespace

std::optional<std::filesystem::path> resume_checkpoint(comm::Communicator& comm, const TrainConfig& config,
                                                       const std::filesystem::path& checkpoints_dir) {
  if (config.resume == "never") return std::nullopt;
  if (config.resume != "auto") {
    std::filesystem::path dir = config.resume;
    if (!std::filesystem::is_directory(dir))
      throw std::invalid_argument("--resume " + config.resume + ": no such checkpoint folder");
    return dir;
  }
  auto step = torch::tensor({int64_t{-1}}, torch::kLong);
  if (comm.rank() == 0) {
    auto latest = checkpoint::find_latest_complete(checkpoints_dir, /*verify_checksums=*/true);
    for (const auto& skipped : latest.skipped) std::printf("%s\n", skipped.describe().c_str());
    std::fflush(stdout);
    if (latest.dir) step[0] = latest.step;
  }
  comm.broadcast(step, 0);
  if (step[0].item<int64_t>() < 0) return std::nullopt;
  return checkpoints_dir / checkpoint::step_dir_name(step[0].item<int64_t>());
}

RestoredTrainState restore_train_checkpoint(comm::Communicator& comm, const std::filesystem::path& dir,
                                            const TrainCheckpointParts& parts) {
  auto reader = checkpoint::CheckpointReader::open(dir);
  const auto& state = reader.train_state();
  if (!state.is_object() || state.value("format", "") != kFormat || state.value("version", 0) != kVersion)
    throw std::runtime_error("checkpoint " + dir.string() + ": train_state is not " + kFormat + " version " +
                             std::to_string(kVersion));
  const std::string expected = model_config_sha256(parts.model_config);
  if (state.value("model_config_sha256", "") != expected)
    throw std::runtime_error("checkpoint " + dir.string() + " was saved from another model (model config sha256 " +
                             state.value("model_config_sha256", "?").substr(0, 12) + ", this run's " +
                             expected.substr(0, 12) + ")");
  checkpoint::restore_sharded_state(reader, parts.model, &parts.optimizer);
  parts.sampler.set_position(state.at("data_position").get<int64_t>());
  if (parts.scaler != nullptr) {
    if (state.contains("grad_scaler") && !state["grad_scaler"].is_null())
      parts.scaler->load_state(state["grad_scaler"]);
    else
      throw std::runtime_error("checkpoint " + dir.string() +
                               " has no grad scaler state, but this run scales its loss (fp16 or --loss-scaling)");
  }
  if (reader.contains(kRngTensor) && reader.tensor(kRngTensor).shape[0] == comm.size()) {
    auto rng = cpu_rng_state();
    reader.read_rows(kRngTensor, comm.rank(), rng.view({1, -1}));
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(rng);
  }
  return {state.at("step").get<int64_t>(), state};
}

std::string batch_change_note(const nlohmann::json& train_state, const TrainConfig& config, int world_size) {
  const auto saved = train_state.value("config", nlohmann::json::object());
  const int64_t saved_batch = saved.value("batch_size", int64_t{0});
  const int64_t saved_accum = saved.value("grad_accum_steps", int64_t{0});
  const int64_t saved_world = train_state.value("world_size", int64_t{0});
  if (saved_batch <= 0 || saved_accum <= 0 || saved_world <= 0)
    return "the checkpoint does not record its batch size, ranks and accumulation steps: cannot tell whether the "
           "batches continue as before";
  int64_t saved_global = 0;
  if (__builtin_mul_overflow(saved_batch, saved_world, &saved_global) ||
      __builtin_mul_overflow(saved_global, saved_accum, &saved_global))
    return "the checkpoint records a batch size, ranks and accumulation steps whose product overflows: cannot tell "
           "whether the batches continue as before";
  auto describe = [](int64_t batch, int64_t world, int64_t accum) {
    return std::to_string(batch * world * accum) + " windows per step (batch size " + std::to_string(batch) + " x " +
           std::to_string(world) + " ranks x " + std::to_string(accum) + " accumulation steps)";
  };
  const int64_t now_global = config.batch_size * world_size * config.grad_accum_steps;
  if (saved_global != now_global)
    return "the checkpoint was trained with " + describe(saved_batch, saved_world, saved_accum) + ", this run uses " +
           describe(config.batch_size, world_size, config.grad_accum_steps) +
           ": it continues from the same data position, but not as the uninterrupted run would";
  if (config.deterministic && saved_batch != config.batch_size)
    return "--deterministic: the checkpoint was trained with --batch-size " + std::to_string(saved_batch) +
           ", this run uses " + std::to_string(config.batch_size) +
           ": the same global batch in other chunks, so not the uninterrupted run's bits";
  return "";
}

namespace {

using Clock = runtime::SteadyClock;
using runtime::ms_since;

// The metrics record of a committed save (core/train/METRICS.md).
nlohmann::json committed_record(int64_t steps_done, const checkpoint::SavedCheckpoint& saved, bool async,
                                double blocked_ms, double save_ms) {
  return {{"kind", "checkpoint"},     {"step", steps_done}, {"dir", saved.dir.string()}, {"async", async},
          {"blocked_ms", blocked_ms}, {"save_ms", save_ms}, {"warnings", saved.warnings}};
}

}  // namespace

TrainCheckpointer::TrainCheckpointer(comm::Communicator& comm, std::filesystem::path checkpoints_dir,
                                     const TrainConfig& config)
    : comm_(comm), checkpoints_dir_(std::move(checkpoints_dir)), config_(config) {
  if (config.async_checkpoint) async_ = std::make_unique<checkpoint::AsyncCheckpointSaver>(comm);
}

TrainCheckpointer::~TrainCheckpointer() = default;

void TrainCheckpointer::save(int64_t steps_done, const TrainCheckpointParts& parts) {
  const auto start = Clock::now();
  auto content = checkpoint::sharded_state(parts.model, &parts.optimizer);
  auto rng = cpu_rng_state();
  content.tensors.push_back(checkpoint::CheckpointTensor{
      kRngTensor, {comm_.size(), rng.numel()}, at::kByte, comm_.rank(), rng.view({1, -1})});
  nlohmann::json state = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", steps_done},
      {"data_position", parts.sampler.position()},
      {"epoch", parts.sampler.epoch()},
      {"grad_scaler", parts.scaler != nullptr ? parts.scaler->state() : nlohmann::json()},
      {"model_config_sha256", model_config_sha256(parts.model_config)},
      {"model_config", parts.model_config},
      {"generation_config", parts.generation_config},
      {"world_size", comm_.size()},
      {"config", config_.to_json()},
  };
  checkpoint::SaveOptions options;
  options.keep_last = config_.keep_last;
  const auto dir = checkpoints_dir_ / checkpoint::step_dir_name(steps_done);
  if (!async_) {
    auto saved = checkpoint::save_checkpoint(comm_, dir, content, state, options);
    const double ms = ms_since(start);
    committed_.push_back(committed_record(steps_done, saved, false, ms, ms));
    return;
  }
  // Waits for the previous save (throwing its failure) before staging this one.
  if (auto previous = async_->wait()) record(*previous);
  async_->save(dir, content, state, options);
  pending_step_ = steps_done;
  pending_blocked_ms_ = ms_since(start);
}

void TrainCheckpointer::record(const checkpoint::FinishedSave& finished) {
  if (finished.saved) {
    // save_ms is measured from where blocked_ms starts (the loop asking for the save), as
    // METRICS.md says: the saver's own clock starts only after the previous save finished,
    // which is (blocked_ms - stage_ms) later. Measured from there, a training loop held by
    // a slow previous save could log a save shorter than the hold.
    const double save_ms = pending_blocked_ms_ - finished.stage_ms + finished.total_ms;
    auto entry = committed_record(pending_step_, *finished.saved, true, pending_blocked_ms_, save_ms);
    entry["staged_pinned"] = finished.staged_pinned;
    committed_.push_back(std::move(entry));
  } else {
    committed_.push_back({{"kind", "checkpoint"},
                          {"step", pending_step_},
                          {"dir", finished.dir.string()},
                          {"async", true},
                          {"error", finished.error}});
  }
}

std::vector<nlohmann::json> TrainCheckpointer::take_committed() {
  if (async_)
    if (auto finished = async_->poll()) record(*finished);
  return std::exchange(committed_, {});
}

void TrainCheckpointer::finish() {
  if (!async_) return;
  if (auto finished = async_->wait()) record(*finished);
}

}  // namespace fsdpp::train
