#include "harness/testing/synthetic_results.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

namespace fsdpp::harness {

std::vector<double> noisy_samples(double center, double noise, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0; };  // (0, 1)
  std::vector<double> values;
  while (values.size() < n) {
    const double r = std::sqrt(-2 * std::log(uniform())), theta = 2 * M_PI * uniform();
    values.push_back(center * (1 + noise * r * std::cos(theta)));
    if (values.size() < n) values.push_back(center * (1 + noise * r * std::sin(theta)));
  }
  return values;
}

nlohmann::json synthetic_cell(const SyntheticCell& cell) {
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  const bool single = cell.system == "pytorch_single";
  nlohmann::json json = {
      {"id", cell.id},
      {"system", cell.system},
      {"config",
       {{"model_type", "gpt2"},
        {"model_size", cell.model_size},
        {"parameters", 7000000},
        {"vocab_size", 8192},
        {"seq_len", 128},
        {"batch_per_rank", cell.global_batch / cell.world_size},
        {"global_batch", cell.global_batch},
        {"world_size", cell.world_size},
        {"strategy", cell.system == "fsdpp"           ? "full_shard"
                     : single                         ? "single"
                     : cell.system == "pytorch_fsdp2" ? "fsdp2"
                                                      : "ddp"},
        {"mixed_precision", cell.mixed_precision},
        {"prefetch", true},
        {"activation_checkpointing", false},
        {"cpu_offload", false},
        {"deterministic", false},
        {"warmup_steps", 2},
        {"timed_steps", 5},
        {"repetitions", 3},
        {"device", "cpu"},
        {"threads_per_rank", 1}}},
      {"status", cell.status},
      {"samples", nlohmann::json::object()},
      {"metrics", nlohmann::json::object()},
  };
  if (cell.status != "ok") {
    json["reason"] = "synthetic " + cell.status + " cell";
    return json;
  }
  json["samples"]["step_ms"] = {{"unit", "ms"}, {"better", "lower"}, {"values", cell.step_ms}};
  json["metrics"]["step_ms_median"] = {{"value", median_of(cell.step_ms)}, {"unit", "ms"}, {"better", "lower"}};
  const double tokens = cell.tokens_per_s.empty() ? 1000.0 * 128 * cell.global_batch / median_of(cell.step_ms)
                                                  : median_of(cell.tokens_per_s);
  json["metrics"]["tokens_per_s"] = {{"value", tokens}, {"unit", "tokens/s"}, {"better", "higher"}};
  if (!cell.tokens_per_s.empty())
    json["samples"]["tokens_per_s"] = {{"unit", "tokens/s"}, {"better", "higher"}, {"values", cell.tokens_per_s}};
  return json;
}

nlohmann::json synthetic_document(const std::string& fingerprint, int index) {
  const int day = 1 + index / 24, hour = index % 24;
  char timestamp[32], run_id[40];
  std::snprintf(timestamp, sizeof timestamp, "2026-11-%02dT%02d:00:00Z", day, hour);
  std::snprintf(run_id, sizeof run_id, "202611%02dT%02d0000Z-%s", day, hour, fingerprint.substr(0, 8).c_str());
  return {
      {"format", "fsdpp.results"},
      {"schema_version", 1},
      {"run_id", run_id},
      {"timestamp", timestamp},
      {"git", {{"commit", "unknown"}, {"dirty", nullptr}}},
      {"command", {"fsdpp", "bench", "--preset", "smoke"}},
      {"machine",
       {{"fingerprint", fingerprint},
        {"hostname", "test-host"},
        {"os", "Debian GNU/Linux 12"},
        {"cpu_model", "Synthetic CPU"},
        {"cpu_cores", 2},
        {"memory_bytes", 25769803776LL},
        {"gpu_model", nullptr},
        {"gpu_count", 0},
        {"gpu_memory_bytes", nullptr},
        {"driver", nullptr},
        {"cuda", nullptr},
        {"nccl", nullptr},
        {"libtorch", "1.13.1"},
        {"compiler", "GCC 12.2.0"}}},
      {"preset", "smoke"},
      {"cells", nlohmann::json::array()},
  };
}

std::vector<nlohmann::json> trend_history(const std::string& fingerprint) {
  struct Spec {
    std::string id, system;
    int world_size;
    std::vector<double> step_ms_by_run;
  };
  const std::vector<Spec> specs = {
      {kTrendCellId, "fsdpp", 2, {100, 104, 108, 135}},
      {kSteadyCellId, "fsdpp", 2, {80, 80, 80, 80}},
      {"gpt2-mini/pytorch_ddp/fp32/n2/ac0", "pytorch_ddp", 2, {90, 90, 90, 90}},
      {"gpt2-mini/pytorch_single/fp32/n1-gb16/ac0", "pytorch_single", 1, {150, 150, 150, 150}},
  };
  std::vector<nlohmann::json> runs;
  for (int run = 0; run < 4; ++run) {
    nlohmann::json doc = synthetic_document(fingerprint, run);
    uint64_t seed = 1000 * run;
    for (const auto& spec : specs) {
      SyntheticCell cell;
      cell.id = spec.id;
      cell.system = spec.system;
      cell.world_size = spec.world_size;
      const double step_ms = spec.step_ms_by_run[run];
      cell.step_ms = noisy_samples(step_ms, 0.03, 15, ++seed);
      cell.tokens_per_s = noisy_samples(1000.0 * 128 * cell.global_batch / step_ms, 0.03, 3, ++seed);
      doc["cells"].push_back(synthetic_cell(cell));
    }
    runs.push_back(std::move(doc));
  }
  return runs;
}

}  // namespace fsdpp::harness
