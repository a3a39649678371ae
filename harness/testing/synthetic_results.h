// Synthetic fsdpp.results v1 documents for the gate and dashboard suites: valid against
// results/schema/v1.json, with samples drawn from a fixed-seed generator so that every
// run of a test sees the same numbers.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace fsdpp::harness {

// `n` values center * (1 + noise * z), z standard normal (Box-Muller over std::mt19937_64:
// the same on every platform, unlike std::normal_distribution).
std::vector<double> noisy_samples(double center, double noise, size_t n, uint64_t seed);

struct SyntheticCell {
  std::string id = "gpt2-mini/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0";
  std::string system = "fsdpp";
  std::string model_size = "mini";
  int world_size = 2;
  int64_t global_batch = 16;  // batch_per_rank = global_batch / world_size
  std::string mixed_precision = "fp32";
  std::string status = "ok";    // "ok", "failed", "unavailable" (then reason is set)
  std::vector<double> step_ms;  // raw samples; medians also go into metrics
  std::vector<double> tokens_per_s;
};

// A cell object (config filled in from `cell`; tokens_per_s samples only when given).
nlohmann::json synthetic_cell(const SyntheticCell& cell);

// A document without cells: run `index` of machine `fingerprint` (16 hex), timestamps an
// hour apart from 2026-11-01T00:00:00Z, run_id derived from both.
nlohmann::json synthetic_document(const std::string& fingerprint, int index);

// Four runs of machine `fingerprint` (oldest first), each with four cells:
//   kTrendCellId   fsdpp full_shard n2, step time 100, 104, 108 ms, then 135 ms: a clear
//                  trend and, in the last run, a regression against the three before;
//   kSteadyCellId  fsdpp no_shard n2, 80 ms throughout;
//   pytorch_ddp n2 (90 ms) and pytorch_single (150 ms, global batch 16), its peers.
// 15 step times (3% noise) and 3 tokens/s values per cell and run.
constexpr const char* kTrendCellId = "gpt2-mini/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0";
constexpr const char* kSteadyCellId = "gpt2-mini/fsdp-no_shard/fp32/n2/pf1-ac0-off0-det0";
std::vector<nlohmann::json> trend_history(const std::string& fingerprint);

}  // namespace fsdpp::harness
