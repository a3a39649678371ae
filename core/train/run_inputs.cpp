#include "core/train/run_inputs.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "core/io/hf_config.h"
#include "core/models/hf_checkpoint.h"
#include "core/models/presets.h"
#include "core/runtime/capabilities.h"
#include "core/runtime/device.h"
#include "core/tokenizer/load.h"

namespace fsdpp::train {

namespace {

// The dataset `spec` (given as `flag`), with at least one window of seq_len and every
// token inside the vocabulary.
data::TokenDataset open_checked_dataset(const std::string& spec, const std::string& flag, int64_t seq_len,
                                        int64_t vocab) {
  auto dataset = data::TokenDataset::open(spec);
  dataset.require_window(seq_len, flag + " " + spec);
  if (dataset.max_token() >= vocab)
    throw std::runtime_error(flag + " " + spec + ": token id " + std::to_string(dataset.max_token()) +
                             " is outside the model's vocabulary of " + std::to_string(vocab));
  return dataset;
}

}  // namespace

RunInputs preflight(const TrainConfig& c) {
  c.validate();
  const auto device = runtime::parse_device(c.device, "--device");  // a CUDA device where there is none: one line
  auto model_config = c.from_scratch ? models::from_scratch_config(c.model_type, c.model_size, c.vocab_size)
                                     : io::load_hf_config(c.model_dir).raw;
  const std::string source = c.from_scratch ? "--model-size " + c.model_size : c.model_dir + "/config.json";
  auto model = models::parse_causal_lm_config(model_config, source);
  // Read now: the export and every checkpoint hold it as the run began (models/hf_checkpoint.h).
  auto generation_config = c.from_scratch ? nlohmann::json() : models::read_generation_config(c.model_dir);
  if (c.mixed_precision == "fp16" && !runtime::cpu_has_fp16_kernels())
    throw std::invalid_argument(
        "--mixed-precision fp16: this LibTorch has no fp16 CPU kernels (matmul, LayerNorm); use bf16 on CPU");
  const int64_t seq_len = c.seq_len > 0 ? c.seq_len : model.limits.max_positions;
  if (seq_len > model.limits.max_positions)
    throw std::invalid_argument("--seq-len " + std::to_string(seq_len) + " is above the model's " +
                                std::to_string(model.limits.max_positions) + " positions");
  auto train_set = open_checked_dataset(c.data, "--data", seq_len, model.limits.vocab_size);
  std::optional<data::TokenDataset> eval_set;
  if (!c.eval_data.empty())
    eval_set = open_checked_dataset(c.eval_data, "--eval-data", seq_len, model.limits.vocab_size);
  // The run copies --tokenizer into its export at the very end: one it cannot read is
  // refused now, not after the training.
  if (!c.tokenizer.empty()) {
    try {
      tokenizer::load_tokenizer(c.tokenizer);
    } catch (const std::exception& e) {
      throw std::invalid_argument("--tokenizer " + c.tokenizer + ": " + e.what());
    }
  }
  return RunInputs{std::move(model_config), std::move(generation_config), std::move(model), seq_len, device,
                   std::move(train_set),    std::move(eval_set)};
}

}  // namespace fsdpp::train
