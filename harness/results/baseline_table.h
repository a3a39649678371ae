// The README's baseline table: fsdpp FULL_SHARD and NO_SHARD on N ranks against the
// unsharded fsdpp baseline (one process, same global batch) and PyTorch single-process and
// DDP on the reference model, from one fsdpp.results document (`fsdpp bench --table FILE`).
//
// Rows, by cell id (harness/bench/matrix.h), in this order: fsdpp full_shard and no_shard
// (pf1-ac0-off0-det0), fsdpp unsharded, pytorch_single (global batch), pytorch_ddp.
// Columns: ranks x threads, tokens/s (median over repetitions), step ms (median, IQR),
// peak memory per rank (MiB; CPU: resident set high-water mark during the timed steps),
// and the ratios tokens/s / PyTorch DDP's, tokens/s / PyTorch single's, peak memory /
// PyTorch DDP's and step time / unsharded fsdpp's, computed here from the document's
// metrics for every row. A cell that did not run ok shows its status and reason; a
// missing cell "not in this document".
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace fsdpp::results {

struct BaselineTableSpec {
  std::string model = "gpt2-mini256";  // harness/bench/matrix.h model_shape name
  std::string mixed_precision = "fp32";
  int world_size = 2;
};

// Markdown: a one-line caption (model, shape, machine, run id), a blank line, the table.
// Throws std::invalid_argument for an unknown model name.
std::string baseline_table(const nlohmann::json& doc, const BaselineTableSpec& spec = {});

// Whether `doc` holds at least one of the table's cells.
bool has_baseline_cells(const nlohmann::json& doc, const BaselineTableSpec& spec = {});

}  // namespace fsdpp::results
