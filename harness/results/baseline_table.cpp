#include "harness/results/baseline_table.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "core/models/presets.h"
#include "harness/bench/matrix.h"
#include "harness/results/printf_text.h"

namespace fsdpp::results {

namespace {

using json = nlohmann::json;
using harness::BenchCell;
using harness::System;

struct Row {
  std::string label;
  BenchCell cell;
};

std::vector<Row> rows_of(const BaselineTableSpec& spec) {
  const auto& model = harness::model_shape(spec.model);
  const int n = spec.world_size;
  const int64_t global = n * model.batch_per_rank;
  const std::string& mp = spec.mixed_precision;
  return {{"fsdpp FULL_SHARD", harness::fsdp_cell(model, "full_shard", mp, n, true, false, false, false)},
          {"fsdpp NO_SHARD", harness::fsdp_cell(model, "no_shard", mp, n, true, false, false, false)},
          {"fsdpp unsharded", harness::unsharded_cell(model, mp, global, false, false)},
          {"PyTorch single", harness::single_peer_cell(model, mp, global, false)},
          {"PyTorch DDP", harness::peer_cell(System::PytorchDdp, model, mp, n, false)},
          {"PyTorch FSDP2", harness::peer_cell(System::PytorchFsdp2, model, mp, n, false)}};
}

const json* find_cell(const json& doc, const std::string& id) {
  if (!doc.contains("cells")) return nullptr;
  for (const auto& c : doc["cells"])
    if (c.value("id", "") == id) return &c;
  return nullptr;
}

std::optional<double> metric_value(const json* cell, const std::string& name) {
  if (cell == nullptr || cell->value("status", "") != "ok" || !cell->contains("metrics")) return std::nullopt;
  const auto& metrics = (*cell)["metrics"];
  if (!metrics.contains(name) || !metrics[name].contains("value") || !metrics[name]["value"].is_number())
    return std::nullopt;
  return metrics[name]["value"].get<double>();
}

std::string ratio(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *b == 0) return "–";
  return printf_text("%.2f", *a / *b);
}

std::string cell_text(std::optional<double> v, const char* fmt, double scale = 1) {
  return v ? printf_text(fmt, *v / scale) : "–";
}

}  // namespace

bool has_baseline_cells(const json& doc, const BaselineTableSpec& spec) {
  for (const auto& row : rows_of(spec))
    if (find_cell(doc, row.cell.id()) != nullptr) return true;
  return false;
}

std::string baseline_table(const json& doc, const BaselineTableSpec& spec) {
  const auto rows = rows_of(spec);
  const auto& model = harness::model_shape(spec.model);
  const json* unsharded = find_cell(doc, rows[2].cell.id());
  const json* single = find_cell(doc, rows[3].cell.id());
  const json* ddp = find_cell(doc, rows[4].cell.id());
  const json* fsdp2 = find_cell(doc, rows[5].cell.id());

  std::string out;
  const json machine = doc.value("machine", json::object());
  auto text = [](const json& j, const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string("?");
  };
  // The architecture, from the preset's config.json (no model is built).
  const json config = models::from_scratch_config(model.model_type, model.size, model.vocab_size);
  auto first_int = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (config.contains(k) && config[k].is_number_integer()) return std::to_string(config[k].get<int64_t>());
    return std::string("?");
  };
  out += model.name() + " (" + first_int({"n_layer", "num_hidden_layers"}) +
         " layers, d=" + first_int({"n_embd", "hidden_size"}) + "): vocab " + std::to_string(model.vocab_size) +
         ", seq " + std::to_string(model.seq_len) + ", " + std::to_string(model.batch_per_rank) +
         " sequences per rank (global batch " + std::to_string(spec.world_size * model.batch_per_rank) + "), " +
         spec.mixed_precision + ", AdamW; " + text(machine, "cpu_model") + ", " +
         (machine.contains("cpu_cores") && machine["cpu_cores"].is_number()
              ? std::to_string(machine["cpu_cores"].get<int>())
              : std::string("?")) +
         " cores, LibTorch " + text(machine, "libtorch") + "; run " + text(doc, "run_id") + " (" +
         std::to_string(rows[0].cell.model.timed_steps) + " timed steps x " +
         (doc.contains("cells") && !doc["cells"].empty()
              ? std::to_string(doc["cells"][0]["config"].value("repetitions", 0))
              : std::string("?")) +
         " repetitions)\n\n";
  out +=
      "| system | ranks x threads | tokens/s | step ms (median, IQR) | peak memory/rank (MiB) "
      "| tokens/s vs PyTorch DDP | tokens/s vs PyTorch FSDP2 | tokens/s vs PyTorch single "
      "| peak memory vs PyTorch DDP | peak memory vs PyTorch FSDP2 | step time vs unsharded |\n";
  out += "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& row : rows) {
    const json* cell = find_cell(doc, row.cell.id());
    std::string shape = "–";
    if (cell != nullptr && cell->contains("config")) {
      const auto& config = (*cell)["config"];
      shape = std::to_string(config.value("world_size", 0)) + " x " +
              (config.contains("threads_per_rank") && config["threads_per_rank"].is_number()
                   ? std::to_string(config["threads_per_rank"].get<int>())
                   : std::string("?"));
    }
    out += "| " + row.label + " | " + shape + " | ";
    if (cell == nullptr) {
      out += "not in this document | | | | | | | | |\n";
      continue;
    }
    if (cell->value("status", "") != "ok") {
      out += cell->value("status", "?") + ": " + cell->value("reason", "") + " | | | | | | | | |\n";
      continue;
    }
    auto tokens = metric_value(cell, "tokens_per_s");
    auto median = metric_value(cell, "step_ms_median");
    auto iqr = metric_value(cell, "step_ms_iqr");
    auto peak = metric_value(cell, "peak_bytes_per_rank");
    out += cell_text(tokens, "%.0f") + " | " + cell_text(median, "%.1f") +
           (iqr ? " (" + printf_text("%.1f", *iqr) + ")" : "") + " | " + cell_text(peak, "%.0f", 1024.0 * 1024.0) +
           " | " + ratio(tokens, metric_value(ddp, "tokens_per_s")) + " | " +
           ratio(tokens, metric_value(fsdp2, "tokens_per_s")) + " | " +
           ratio(tokens, metric_value(single, "tokens_per_s")) + " | " +
           ratio(peak, metric_value(ddp, "peak_bytes_per_rank")) + " | " +
           ratio(peak, metric_value(fsdp2, "peak_bytes_per_rank")) + " | " +
           ratio(median, metric_value(unsharded, "step_ms_median")) + " |\n";
  }
  return out;
}

}  // namespace fsdpp::results
