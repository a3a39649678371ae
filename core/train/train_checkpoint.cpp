#include "core/train/train_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdio>
#include <stdexcept>

#include "core/checkpoint/checkpoint_scan.h"
#include "core/checkpoint/fsdp_state.h"
#include "core/checkpoint/sha256.h"

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

int64_t restore_train_checkpoint(comm::Communicator& comm, const std::filesystem::path& dir,
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
  return state.at("step").get<int64_t>();
}

void save_train_checkpoint(comm::Communicator& comm, const std::filesystem::path& checkpoints_dir,
                           int64_t steps_done, const TrainCheckpointParts& parts, const TrainConfig& config) {
  auto content = checkpoint::sharded_state(parts.model, &parts.optimizer);
  auto rng = cpu_rng_state();
  content.tensors.push_back(checkpoint::CheckpointTensor{
      kRngTensor, {comm.size(), rng.numel()}, at::kByte, comm.rank(), rng.view({1, -1})});
  nlohmann::json state = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", steps_done},
      {"data_position", parts.sampler.position()},
      {"epoch", parts.sampler.epoch()},
      {"grad_scaler", parts.scaler != nullptr ? parts.scaler->state() : nlohmann::json()},
      {"model_config_sha256", model_config_sha256(parts.model_config)},
      {"model_config", parts.model_config},
      {"world_size", comm.size()},
      {"config", config.to_json()},
  };
  checkpoint::SaveOptions options;
  options.keep_last = config.keep_last;
  auto saved = checkpoint::save_checkpoint(comm, checkpoints_dir / checkpoint::step_dir_name(steps_done), content,
                                           state, options);
  if (comm.rank() == 0) {
    std::printf("checkpoint step %lld -> %s\n", static_cast<long long>(steps_done), saved.dir.string().c_str());
    for (const auto& w : saved.warnings) std::printf("warning: %s\n", w.c_str());
    std::fflush(stdout);
  }
}

}  // namespace fsdpp::train
