// A model's parameters, each tensor once.
//
// LibTorch's Module::named_parameters lists a tied weight (GPT-2's LM head is its token
// embedding) under each of its names. Whatever steps, stores or counts parameters must see
// such a tensor once: the optimizer (make_adamw), the checkpoint writer and loader
// (hf_checkpoint), byte counts (the benchmarks) and the equivalence oracle's reference.
// This is the one place that rule is written; order is named_parameters' order, and a
// tensor's name is the first name it appears under (the one save_pretrained stores).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

namespace fsdpp::nn {

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

struct UniqueParameter {
  std::string name;  // its first name
  at::Tensor tensor;
  std::vector<std::string> aliases;  // every name it is listed under, `name` first
};

// Each entry of `named` whose tensor was not listed before, with all its names.
std::vector<UniqueParameter> unique_parameters(const NamedParameters& named);
std::vector<UniqueParameter> unique_parameters(const torch::nn::Module& module);

// The same as (name, tensor) pairs.
NamedParameters unique_named_parameters(const NamedParameters& named);
NamedParameters unique_named_parameters(const torch::nn::Module& module);

}  // namespace fsdpp::nn
