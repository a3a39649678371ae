// Small valid fsdpp.results v1 documents for suites (results/README.md), and the paths of
// the results fixtures in the source tree.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace fsdpp::harness {

// An "ok" fsdpp cell: gpt2-mini, full_shard, fp32, 2 ranks, CPU. Samples: step_ms
// `step_ms` and tokens_per_s derived from it (16 x 128 tokens per step); metrics:
// step_ms_median (the median of `step_ms`) and tokens_per_s, with units.
nlohmann::json sample_results_cell(const std::string& id, const std::vector<double>& step_ms = {10.0, 11.0, 12.0});

// A valid document holding `cells`: run "20261122T190000Z-1a2b3c4d" at
// "2026-11-22T19:00:00Z", this host's machine_info(), preset "smoke".
nlohmann::json sample_results_document(const std::vector<nlohmann::json>& cells);

// <source>/suites/results/fixtures/<name>.
std::filesystem::path results_fixture(const std::string& name);

// <source>/<relative>: files of the source tree the suites check (e.g. the schema).
std::filesystem::path source_tree_file(const std::string& relative);

}  // namespace fsdpp::harness
