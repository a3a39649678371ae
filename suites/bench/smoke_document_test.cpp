// What `fsdpp bench --preset smoke` must have written: run by the bench.smoke ctest
// (bench_smoke.sh) on the document named by $FSDPP_BENCH_SMOKE_DOC; skipped without it
// (and left out of the default test list).
//
// Analytic ZeRO-3 volume (as suites/fsdp/accounting_test.cpp): with N ranks and unit u of
// padded size P_u = N * sum_p ceil(dim0_p / N) * row_p elements, one FULL_SHARD step sends
// per rank (N-1)/N * (2 * sum_{u != root} P_u + P_root) all-gather elements in the compute
// dtype and (N-1)/N * sum_u P_u reduce-scatter elements in the reduce dtype (fp32).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>

#include "core/fsdp/sharded_model.h"
#include "core/models/presets.h"
#include "core/nn/deferred_init.h"
#include "core/runtime/capabilities.h"
#include "harness/bench/cell_run.h"
#include "harness/bench/matrix.h"
#include "harness/results/baseline_table.h"
#include "harness/results/results_document.h"
#include "harness/testing/multirank.h"

namespace fsdpp::harness {
namespace {

using json = nlohmann::json;

const json* smoke_document() {
  static const json doc = [] {
    const char* path = std::getenv("FSDPP_BENCH_SMOKE_DOC");
    return path == nullptr ? json(nullptr) : results::load_results(path);
  }();
  return doc.is_null() ? nullptr : &doc;
}

#define REQUIRE_DOCUMENT()                                                                          \
  const json* doc_ptr = smoke_document();                                                           \
  if (doc_ptr == nullptr) GTEST_SKIP() << "set FSDPP_BENCH_SMOKE_DOC (the bench.smoke ctest does)"; \
  const json& doc = *doc_ptr

std::map<std::string, BenchCell> smoke_cells_by_id() {
  std::map<std::string, BenchCell> out;
  for (const auto& c : preset_cells("smoke")) out[c.id()] = c;
  return out;
}

const json* find_cell(const json& doc, const std::string& id) {
  for (const auto& c : doc["cells"])
    if (c["id"] == id) return &c;
  return nullptr;
}

bool is_ok(const json* cell) { return cell != nullptr && (*cell)["status"] == "ok"; }

bool metric_is_number(const json& cell, const std::string& name) {
  return cell["metrics"].contains(name) && cell["metrics"][name]["value"].is_number();
}
double metric(const json& cell, const std::string& name) { return cell["metrics"][name]["value"].get<double>(); }

TEST(SmokeDocument, HoldsEverySmokeCellOnceAndNoneFailed) {
  REQUIRE_DOCUMENT();
  EXPECT_EQ(doc["preset"], "smoke");
  auto expected = smoke_cells_by_id();
  std::map<std::string, int> seen;
  for (const auto& c : doc["cells"]) {
    ++seen[c["id"].get<std::string>()];
    EXPECT_NE(c["status"], "failed") << c["id"] << ": " << c.value("reason", "");
  }
  EXPECT_EQ(seen.size(), expected.size());
  for (const auto& [id, cell] : expected) EXPECT_EQ(seen[id], 1) << id;
}

TEST(SmokeDocument, PeerCellsAreMeasuredOrUnavailableForAReason) {
  REQUIRE_DOCUMENT();
  CellRunSetup here;  // the interpreter `fsdpp bench` uses by default
  for (const auto& [id, cell] : smoke_cells_by_id()) {
    if (cell.system == System::Fsdpp) continue;
    const json* c = find_cell(doc, id);
    ASSERT_NE(c, nullptr) << id;
    auto reason = unavailable_reason(cell, here);
    // FSDP2 included: it runs on the CPU over Gloo (PyTorch >= 2.6), so it must be measured.
    if (reason) {
      EXPECT_EQ((*c)["status"], "unavailable") << id;
      EXPECT_EQ((*c).value("reason", ""), *reason) << id;
    } else {
      ASSERT_EQ((*c)["status"], "ok") << id << ": " << (*c).value("reason", "");
      EXPECT_GT(metric(*c, "tokens_per_s"), 0) << id;
      EXPECT_GT(metric(*c, "step_ms_median"), 0) << id;
      EXPECT_GT(metric(*c, "peak_bytes_per_rank"), 0) << id;
      const auto& config = (*c)["config"];
      EXPECT_EQ((*c)["samples"]["step_ms"]["values"].size(),
                static_cast<size_t>(config["timed_steps"].get<int>() * config["repetitions"].get<int>()))
          << id;
    }
  }
}

TEST(SmokeDocument, CpuCellsOfBothSystemsRanPinnedToTheirOwnCores) {
  REQUIRE_DOCUMENT();
  int fsdpp_cpu = 0, peer_cpu = 0;
  for (const auto& c : doc["cells"]) {
    if (c["status"] != "ok") continue;
    SCOPED_TRACE(c["id"].get<std::string>());
    EXPECT_EQ(c["config"]["cpu_binding"], c["config"]["device"] == "cpu" ? "cores" : "none");
    if (c["config"]["device"] == "cpu") ++(c["system"] == "fsdpp" ? fsdpp_cpu : peer_cpu);
  }
  // Both systems: a CPU document has ok cells of each (PeerCellsAreMeasuredOrUnavailableForAReason).
  if (doc["cells"][0]["config"]["device"] == "cpu") {
    EXPECT_GE(fsdpp_cpu, 1);
    EXPECT_GE(peer_cpu, 1);
  }
}

TEST(SmokeDocument, FsdppRanksKeptFreedHostBlocksAndSaySo) {
  REQUIRE_DOCUMENT();
  int checked = 0;
  for (const auto& c : doc["cells"]) {
    if (c["status"] != "ok" || c["system"] != "fsdpp") continue;
    ++checked;
    EXPECT_EQ(c["config"].value("host_heap", std::string("absent")), "kept") << c["id"];
  }
  EXPECT_GE(checked, 1);
}

TEST(SmokeDocument, EveryOkFsdppCellHasEveryMetric) {
  REQUIRE_DOCUMENT();
  auto cells = smoke_cells_by_id();
  int checked = 0;
  for (const auto& c : doc["cells"]) {
    if (c["system"] != "fsdpp" || c["status"] != "ok") continue;
    ++checked;
    const std::string id = c["id"];
    const BenchCell& cell = cells.at(id);
    const auto& config = c["config"];
    SCOPED_TRACE(id);
    EXPECT_EQ(c["samples"]["step_ms"]["values"].size(),
              static_cast<size_t>(config["timed_steps"].get<int>() * config["repetitions"].get<int>()));
    EXPECT_EQ(c["samples"]["tokens_per_s"]["values"].size(), static_cast<size_t>(config["repetitions"].get<int>()));
    EXPECT_EQ(config["injected_delay_pct"], 0);
    // Measured on every cell, positive.
    for (const char* name : {"step_ms_median", "step_ms_min", "tokens_per_s", "achieved_flops_per_s",
                             "matmul_peak_flops_per_s", "mfu", "persistent_bytes_per_rank", "peak_bytes_per_rank",
                             "persistent_after_setup_bytes_per_rank", "peak_allocated_bytes_per_rank"}) {
      ASSERT_TRUE(metric_is_number(c, name)) << name;
      EXPECT_GT(metric(c, name), 0) << name;
    }
    for (const char* name :
         {"step_ms_iqr", "step_ms_cv", "comm_bytes_per_step_all_gather", "comm_bytes_per_step_reduce_scatter",
          "comm_bytes_per_step_all_reduce", "comm_ms_per_step"}) {
      ASSERT_TRUE(metric_is_number(c, name)) << name;
      EXPECT_GE(metric(c, name), 0) << name;
    }
    // Communication exists exactly where there are peers to talk to.
    const bool talks = cell.world_size > 1;
    EXPECT_EQ(metric(c, "comm_ms_per_step") > 0, talks);
    EXPECT_EQ(metric_is_number(c, "exposed_comm_fraction"), talks);
    if (cell.strategy == "full_shard" || cell.strategy == "shard_grad_op") {
      EXPECT_GT(metric(c, "comm_bytes_per_step_all_gather"), 0);
      EXPECT_GT(metric(c, "comm_bytes_per_step_reduce_scatter"), 0);
    }
    if (cell.strategy == "no_shard") {
      EXPECT_EQ(metric(c, "comm_bytes_per_step_all_gather"), 0);
      EXPECT_GT(metric(c, "comm_bytes_per_step_all_reduce"), 0);
    }
    // Comparisons: present, and a number exactly when the other side ran ok.
    for (const char* name : {"overhead_vs_unsharded", "tokens_per_s_ratio_vs_pytorch_ddp",
                             "tokens_per_s_ratio_vs_pytorch_single", "tokens_per_s_ratio_vs_pytorch_fsdp2"})
      ASSERT_TRUE(c["metrics"].contains(name)) << name;
    auto base = unsharded_baseline(cell);
    EXPECT_EQ(metric_is_number(c, "overhead_vs_unsharded"), base && is_ok(find_cell(doc, base->id())));
    std::set<std::string> peers_ok;
    for (const auto& [peer_id, peer] : cells)
      if (peer_matches(peer, cell) && is_ok(find_cell(doc, peer_id))) peers_ok.insert(to_string(peer.system));
    for (const char* peer : {"pytorch_ddp", "pytorch_single", "pytorch_fsdp2"})
      EXPECT_EQ(metric_is_number(c, std::string("tokens_per_s_ratio_vs_") + peer), peers_ok.count(peer) == 1) << peer;
  }
  EXPECT_GE(checked, 10);
}

// Same initial weights, same batches, same AdamW: on the CPU every peer starts as fsdpp
// (cell_run.h peer_shares_fsdpp_init), so an fp32 fsdpp cell and a peer on the same ranks
// must log the same loss at every timed step, within torch.testing.assert_close's fp32
// defaults (rtol 1.3e-6, atol 1e-5), in the same run. The FULL_SHARD cell against FSDP2
// is the comparison that must be there.
TEST(SmokeDocument, Fp32CellsAndPeersThatStartedAsFsdppLogTheSameLossCurve) {
  REQUIRE_DOCUMENT();
  if (doc["cells"][0]["config"]["device"] != "cpu") GTEST_SKIP() << "a CUDA document: the peers drew their own init";
  const auto cells = smoke_cells_by_id();
  int compared = 0, full_shard_vs_fsdp2 = 0;
  for (const auto& c : doc["cells"]) {
    if (c["system"] != "fsdpp" || c["status"] != "ok" || c["config"]["mixed_precision"] != "fp32") continue;
    const BenchCell& cell = cells.at(c["id"]);
    for (const auto& [peer_id, peer] : cells) {
      const json* p = find_cell(doc, peer_id);
      if (peer.system == System::Fsdpp || !peer_matches(peer, cell) || !is_ok(p) ||
          peer.world_size != cell.world_size || peer.batch_per_rank != cell.batch_per_rank)
        continue;
      SCOPED_TRACE(c["id"].get<std::string>() + " vs " + peer_id);
      ASSERT_EQ((*p)["config"]["started_as_fsdpp"], true);
      const auto ours = c["samples"]["loss"]["values"].get<std::vector<double>>();
      const auto theirs = (*p)["samples"]["loss"]["values"].get<std::vector<double>>();
      ASSERT_EQ(ours.size(), theirs.size());
      ASSERT_FALSE(ours.empty());
      double worst = 0;
      for (size_t i = 0; i < ours.size(); ++i) {
        EXPECT_LE(std::abs(ours[i] - theirs[i]), 1e-5 + 1.3e-6 * std::abs(theirs[i]))
            << "timed step " << i << ": " << ours[i] << " vs " << theirs[i];
        worst = std::max(worst, std::abs(ours[i] - theirs[i]));
      }
      EXPECT_DOUBLE_EQ(metric(c, std::string("loss_max_abs_diff_vs_") + to_string(peer.system)), worst);
      ++compared;
      full_shard_vs_fsdp2 += peer.system == System::PytorchFsdp2 && cell.strategy == "full_shard";
    }
  }
  EXPECT_GE(full_shard_vs_fsdp2, 1);
  std::printf("loss curves compared: %d fsdpp/peer pairs\n", compared);
}

TEST(SmokeDocument, Fp16CellsAreUnavailableExactlyWhereTheCpuHasNoFp16Kernels) {
  REQUIRE_DOCUMENT();
  if (doc["cells"][0]["config"]["device"] != "cpu") GTEST_SKIP() << "a CUDA document";
  int fp16 = 0;
  for (const auto& c : doc["cells"]) {
    if (c["config"]["mixed_precision"] != "fp16" || c["system"] != "fsdpp") continue;
    ++fp16;
    EXPECT_EQ(c["status"] == "unavailable", !runtime::cpu_has_fp16_kernels()) << c["id"];
    if (c["status"] == "unavailable") {
      EXPECT_NE(c.value("reason", "").find("fp16"), std::string::npos) << c["id"];
    }
  }
  EXPECT_GE(fp16, 1);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(SmokeDocument, FullShardSendsTheAnalyticZero3Volume) {
  REQUIRE_DOCUMENT();
  int checked = 0;
  for (const auto& c : doc["cells"]) {
    const auto& config = c["config"];
    if (c["system"] != "fsdpp" || c["status"] != "ok" || config["strategy"] != "full_shard") continue;
    const std::string mp = config["mixed_precision"];
    const int n = config["world_size"];
    if (n < 2 || (mp != "fp32" && mp != "bf16")) continue;
    ++checked;
    const double all_gather = metric(c, "comm_bytes_per_step_all_gather");
    const double reduce_scatter = metric(c, "comm_bytes_per_step_reduce_scatter");
    const auto model_config =
        models::from_scratch_config(config["model_type"].get<std::string>(), config["model_size"].get<std::string>(),
                                    config["vocab_size"].get<int64_t>());
    const int64_t gather_bytes = mp == "bf16" ? 2 : 4, reduce_bytes = 4;  // reduce in fp32
    // The units a ShardedModel makes of this model on n ranks, as the benchmark wraps it.
    expect_ranks_pass(n, [&](RankContext& ctx) {
      models::CausalLm lm = [&] {
        nn::DeferredInit deferred;
        return models::build_causal_lm(model_config, "smoke document");
      }();
      fsdp::FsdpOptions options;
      options.materialize = models::seeded_rows(0, lm.model_type);
      auto sharded =
          fsdp::ShardedModel::create(lm.module, ctx.comm, options, fsdp::wrap_by_module_type({lm.block_type}));
      int64_t all = 0, root = 0;
      const auto& units = sharded->units();
      for (size_t u = 0; u < units.size(); ++u) {
        int64_t padded = 0;
        for (auto& p : units[u]->params()) {
          const auto& shape = p.shape();
          int64_t dim0 = shape.empty() ? 1 : shape[0], row = 1;
          for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
          padded += n * ceil_div(dim0, n) * row;
        }
        all += padded;
        if (u + 1 == units.size()) root = padded;  // the root unit is created last
      }
      if (ctx.rank != 0) return;
      EXPECT_EQ(all_gather, static_cast<double>((2 * (all - root) + root) / n * (n - 1) * gather_bytes)) << c["id"];
      EXPECT_EQ(reduce_scatter, static_cast<double>(all / n * (n - 1) * reduce_bytes)) << c["id"];
    });
  }
  EXPECT_GE(checked, 2);  // the reference model and the tiny ones
}

TEST(SmokeDocument, TheBaselineTableHasTheFsdppRowsMeasured) {
  REQUIRE_DOCUMENT();
  std::string table = results::baseline_table(doc);
  for (const char* row : {"| fsdpp FULL_SHARD |", "| fsdpp NO_SHARD |", "| fsdpp unsharded |"}) {
    auto start = table.find(row);
    ASSERT_NE(start, std::string::npos) << row << "\n" << table;
    std::string line = table.substr(start, table.find('\n', start) - start);
    EXPECT_EQ(line.find("not in this document"), std::string::npos) << line;
    EXPECT_EQ(line.find("failed"), std::string::npos) << line;
    // Measured: tokens/s and the step time are numbers (an unavailable cell's row holds its
    // reason there instead).
    EXPECT_TRUE(std::regex_search(line, std::regex("^\\| [^|]+ \\| [^|]+ \\| [0-9]+ \\| [0-9]+\\.[0-9]"))) << line;
  }
}

}  // namespace
}  // namespace fsdpp::harness
