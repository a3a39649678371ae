// `fsdpp generate` and `fsdpp eval`: a Hugging Face model folder (config.json,
// safetensors, tokenizer files) used for text continuation and held-out loss; and
// `fsdpp model-size`: the from-scratch presets and their exact parameter counts.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "harness/cli/command.h"

namespace fsdpp::cli {

class ModelCommands final : public Command {
 public:
  // Command (command.h): parsed() if any of the three was.
  void add_to(CLI::App& app) override;
  bool parsed() const override;
  int run(const std::vector<std::string>& argv) override;

 private:
  CLI::App* generate_ = nullptr;
  CLI::App* eval_ = nullptr;
  CLI::App* size_ = nullptr;
  std::vector<std::string> presets_;
  std::string config_dir_;
  std::string model_dir_, prompt_, data_path_, dtype_ = "fp32", logits_out_;
  int64_t max_new_tokens_ = 32, top_k_ = 0, seq_len_ = 0, batch_size_ = 8;
  double temperature_ = 1.0, top_p_ = 1.0;
  uint64_t seed_ = 0;
  bool json_ = false;
};

}  // namespace fsdpp::cli
