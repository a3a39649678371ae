// Applies activation checkpointing to a model from outside (like FSDP's
// apply_activation_checkpointing and torchtitan's per-layer AC): selected submodules keep
// only their input in forward and recompute their forward in backward (nn::checkpoint).
// Works on a plain model and on one wrapped by ShardedModel, in either order; a
// checkpointed FSDP unit is re-all-gathered for its recomputation only if it was
// resharded after forward (FULL_SHARD, HYBRID_SHARD), which its backward would do anyway.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace fsdpp::fsdp {

struct CheckpointPolicy {
  // Type names (Module::name(), e.g. "fsdpp::models::TinyBlockImpl"), as wrap_by_module_type.
  std::vector<std::string> module_types;
  // Of the matching modules in model order (pre-order, as named_modules), the k-th, 2k-th,
  // ... are checkpointed: 1 is every one, 2 every second. Same selection as torchtitan's
  // per-layer AC frequency (ac_freq).
  int every_k = 1;
};

// Marks the selected modules of root (root itself included) and returns their qualified
// names ("" for root). The model must call them through nn::call, and must have been made
// by a shared_ptr (as every TORCH_MODULE holder is). Throws std::invalid_argument if
// every_k < 1, module_types is empty, or no module matches (a misspelt type name).
// ModuleList and ModuleDict are never selected (they are not called).
std::vector<std::string> apply_activation_checkpointing(torch::nn::Module& root, const CheckpointPolicy& policy);

// Unmarks every module of root.
void remove_activation_checkpointing(torch::nn::Module& root);

}  // namespace fsdpp::fsdp
