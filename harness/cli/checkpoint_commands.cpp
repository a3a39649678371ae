#include "harness/cli/checkpoint_commands.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <stdexcept>

#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/hf_export.h"

namespace fsdpp::cli {

void CheckpointCommands::add_to(CLI::App& app) {
  auto* group = app.add_subcommand("checkpoint", "Sharded checkpoints (core/checkpoint/CHECKPOINT.md)");
  group->require_subcommand(1);
  export_ = group->add_subcommand("export", "Write a checkpoint's model as a Hugging Face folder (streamed)");
  export_->add_option("checkpoint", checkpoint_, "Checkpoint folder (<run>/checkpoints/step-NNNNNN)")->required();
  export_->add_option("--out", out_, "Output folder (config.json + model*.safetensors)")->required();
  max_shard_bytes_ = checkpoint::kDefaultMaxShardBytes;
  export_
      ->add_option("--max-shard-bytes", max_shard_bytes_,
                   "Split into model-0000i-of-0000n.safetensors above this many bytes (HF default 5e9)")
      ->check(CLI::PositiveNumber);
  inspect_ = group->add_subcommand("inspect", "Print what a checkpoint holds and verify every file's sha256");
  inspect_->add_option("checkpoint", checkpoint_, "Checkpoint folder")->required();
  inspect_->add_flag("--json", json_, "Print one JSON object instead of text");
}

bool CheckpointCommands::parsed() const {
  return (export_ != nullptr && export_->parsed()) || (inspect_ != nullptr && inspect_->parsed());
}

int CheckpointCommands::run(const std::vector<std::string>& /*argv*/) {
  if (export_ != nullptr && export_->parsed()) {
    auto reader = checkpoint::CheckpointReader::open(checkpoint_);
    auto result = checkpoint::export_hf_folder(reader, out_, max_shard_bytes_);
    std::printf("exported %lld tensors (%llu bytes) from %s to %s in %zu file(s)\n",
                static_cast<long long>(result.tensors), static_cast<unsigned long long>(result.files.total_size),
                checkpoint_.c_str(), out_.c_str(), result.files.shard_paths.size());
    return 0;
  }
  if (inspect_ != nullptr && inspect_->parsed()) {
    auto reader = checkpoint::CheckpointReader::open(checkpoint_);
    std::string checksums = "ok";
    try {
      reader.verify_all();
    } catch (const std::exception& e) {
      checksums = e.what();
    }
    const auto& index = reader.index();
    const auto& state = reader.train_state();
    nlohmann::json tensors = nlohmann::json::array();
    int64_t total_bytes = 0;
    for (const auto& [name, entry] : index.tensors) {
      int64_t numel = 1;
      for (int64_t d : entry.shape) numel *= d;
      const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(entry.dtype));
      total_bytes += bytes;
      tensors.push_back({{"name", name},
                         {"shape", entry.shape},
                         {"dtype", c10::toString(entry.dtype)},
                         {"bytes", bytes},
                         {"pieces", entry.pieces.size()}});
    }
    nlohmann::json files = nlohmann::json::array();
    for (const auto& [name, file] : index.files)
      files.push_back({{"file", name}, {"rank", file.rank}, {"bytes", file.bytes}, {"sha256", file.sha256}});
    nlohmann::json summary = {
        {"checkpoint", checkpoint_},
        {"step", state.value("step", int64_t{-1})},
        {"world_size", index.world_size},
        {"strategy", index.mesh.strategy},
        {"shard_group_size", index.mesh.shard_group_size},
        {"replicas", index.mesh.replicas},
        {"tensors", tensors},
        {"tensor_bytes", total_bytes},
        {"files", files},
        {"checksums", checksums},
    };
    if (json_) {
      std::printf("%s\n", summary.dump(2).c_str());
    } else {
      std::printf("checkpoint %s\n  step %lld, saved by %d ranks (%s, shard group %d x %d replicas)\n",
                  checkpoint_.c_str(), static_cast<long long>(summary["step"].get<int64_t>()), index.world_size,
                  index.mesh.strategy.c_str(), index.mesh.shard_group_size, index.mesh.replicas);
      std::printf("  %zu tensors, %lld bytes; %zu files; checksums: %s\n", index.tensors.size(),
                  static_cast<long long>(total_bytes), index.files.size(), checksums.c_str());
      for (const auto& t : tensors)
        std::printf("  %-60s %-10s %s\n", t["name"].get<std::string>().c_str(), t["dtype"].get<std::string>().c_str(),
                    t["shape"].dump().c_str());
    }
    return checksums == "ok" ? 0 : 1;
  }
  return -1;
}

}  // namespace fsdpp::cli
