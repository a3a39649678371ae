#include "harness/testing/results_samples.h"

#include <algorithm>

#include "harness/results/results_document.h"

namespace fsdpp::harness {

using nlohmann::json;

json sample_results_cell(const std::string& id, const std::vector<double>& step_ms) {
  const json config = {{"model_type", "gpt2"},     {"model_size", "mini"},
                       {"parameters", 7000000},    {"vocab_size", 8192},
                       {"seq_len", 128},           {"batch_per_rank", 8},
                       {"global_batch", 16},       {"world_size", 2},
                       {"strategy", "full_shard"}, {"mixed_precision", "fp32"},
                       {"prefetch", true},         {"activation_checkpointing", false},
                       {"cpu_offload", false},     {"deterministic", false},
                       {"warmup_steps", 2},        {"timed_steps", static_cast<int64_t>(step_ms.size())},
                       {"repetitions", 1},         {"device", "cpu"},
                       {"threads_per_rank", 1}};
  std::vector<double> sorted = step_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n == 0 ? 0.0 : (n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2);
  const double tokens_per_step = 16.0 * 128.0;
  json tokens_per_s = json::array();
  for (double ms : step_ms) tokens_per_s.push_back(tokens_per_step / (ms / 1000.0));
  return {{"id", id},
          {"system", "fsdpp"},
          {"config", config},
          {"status", "ok"},
          {"samples",
           {{"step_ms", {{"unit", "ms"}, {"better", "lower"}, {"values", step_ms}}},
            {"tokens_per_s", {{"unit", "tokens/s"}, {"better", "higher"}, {"values", tokens_per_s}}}}},
          {"metrics",
           {{"step_ms_median", {{"value", median}, {"unit", "ms"}, {"better", "lower"}}},
            {"tokens_per_s",
             {{"value", tokens_per_step / (median / 1000.0)}, {"unit", "tokens/s"}, {"better", "higher"}}}}}};
}

json sample_results_document(const std::vector<json>& cells) {
  return {{"format", results::kFormat},
          {"schema_version", results::kSchemaVersion},
          {"run_id", "20261122T190000Z-1a2b3c4d"},
          {"timestamp", "2026-11-22T19:00:00Z"},
          {"git", {{"commit", "unknown"}, {"dirty", nullptr}}},
          {"command", {"fsdpp", "bench", "--preset", "smoke"}},
          {"machine", results::machine_info()},
          {"preset", "smoke"},
          {"cells", cells}};
}

std::filesystem::path results_fixture(const std::string& name) {
  return std::filesystem::path(FSDPP_SOURCE_DIR) / "suites" / "results" / "fixtures" / name;
}

std::filesystem::path source_tree_file(const std::string& relative) {
  return std::filesystem::path(FSDPP_SOURCE_DIR) / relative;
}

}  // namespace fsdpp::harness
