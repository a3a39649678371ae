// `fsdpp plan --fit`: every combination of strategy x activation checkpointing x CPU
// offload x micro-batch (keeping the tokens per rank per step: batch x accumulation) is
// planned; the fastest predicted one whose peak fits the stated device memory wins, and
// every other says why not (does not fit, or slower).
#pragma once

#include <string>
#include <vector>

#include "core/plan/plan_document.h"

namespace fsdpp::plan {

struct FitCandidate {
  Plan plan;
  bool chosen = false;
  std::string verdict;  // "chosen", "does not fit: peak X > Y", "slower: ...", or "cannot run: ..."
};

struct FitResult {
  std::vector<FitCandidate> candidates;
  int chosen = -1;  // index into candidates; -1 when none fits
};

// Requires a device memory and a device rate (config.device). Throws
// std::invalid_argument naming --gpu-memory without them.
FitResult search_fit(const std::string& model, const ModelShape& shape, const PlanConfig& base);

}  // namespace fsdpp::plan
