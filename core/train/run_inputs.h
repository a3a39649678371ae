// What a training run reads before its first step, resolved once per process: the model's
// config (the from-scratch preset or <model>/config.json, read and parsed once), the
// sequence length, the device asked for, and the datasets, opened and checked against the
// model. `fsdpp train` resolves it before it starts ranks, so that bad input is one error
// line, and each rank process hands its own to train() (trainer.h), which reads none of
// it again.
//
// Contract
// - Not collective: reads files only, on whichever rank or launcher calls it.
// - Errors: std::invalid_argument / std::runtime_error naming the flag or file at fault.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "core/data/token_dataset.h"
#include "core/models/causal_lm.h"
#include "core/train/train_config.h"

namespace fsdpp::train {

struct RunInputs {
  nlohmann::json model_config;                 // as read: the from-scratch preset or the config.json document
  nlohmann::json generation_config;            // the --model folder's generation_config.json; null: none
  models::CausalLmConfig model;                // model_config parsed: its limits, and build()
  int64_t seq_len = 0;                         // --seq-len, or the model's positions
  at::Device device = at::kCPU;                // --device as given ("cuda" without an index: per rank, trainer.h)
  data::TokenDataset train_set;                // --data
  std::optional<data::TokenDataset> eval_set;  // --eval-data, when given
};

// Checks what can be checked before any rank starts and resolves the inputs: the flags
// (TrainConfig::validate), the device (a CUDA device where there is none is refused), the
// model's config and generation config, fp16 against this LibTorch's CPU kernels, the sequence length against
// the model's positions, the datasets (readable, at least one window, every token
// inside the vocabulary) and --tokenizer (one that `fsdpp generate` reads, as the export
// copies it). Throws naming the flag or file at fault.
RunInputs preflight(const TrainConfig& config);

}  // namespace fsdpp::train
