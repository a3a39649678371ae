// `fsdpp bench` keeps its progress after every cell (harness/bench/bench_progress.h): a run
// killed between cells, rerun with --resume, runs only the cells it lacks and writes the
// document the uninterrupted run would have; a progress file from another command, or one
// it does not understand, is refused by name.
#include "harness/bench/bench_progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "harness/bench/cell_run.h"
#include "harness/results/results_document.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::harness {
namespace {

namespace fs = std::filesystem;

const std::string kTwoCells = "'^gpt2-tiny/unsharded/fp32/n1-gb8/ac0-det[01]$'";

std::string bench_command(const fs::path& out, const std::string& extra = "") {
  return std::string(FSDPP_CLI_PATH) + " bench --preset smoke --filter " + kTwoCells + " --repetitions 1 --out " +
         out.string() + extra;
}

BenchCell smoke_cell(const std::string& id) {
  for (const auto& c : preset_cells("smoke"))
    if (c.id() == id) return c;
  throw std::logic_error("no smoke cell " + id);
}

TEST(BenchResume, AKilledRunRerunWithResumeRunsOnlyTheCellsItLacks) {
  TempDir dir("bench-resume");
  const auto out = dir / "doc.json", progress = BenchProgress::path_for(out);
  // Killed (SIGKILL, its whole process group) once the first cell is on record.
  const std::string killed = "setsid " + bench_command(out) + " > " + (dir / "killed.log").string() +
                             " 2>&1 & pid=$!; " + "for i in $(seq 1200); do grep -q '\"id\"' " + progress.string() +
                             " 2>/dev/null && break; sleep 0.1; done; /bin/kill -KILL -- -$pid; wait $pid";
  auto [kill_code, kill_output] = run_shell(killed);
  ASSERT_NE(kill_code, 0) << kill_output;
  ASSERT_FALSE(fs::exists(out));
  ASSERT_TRUE(fs::exists(progress));
  const auto stored = read_json_file(progress);
  ASSERT_EQ(stored["cells"].size(), 1u) << stored.dump(1);
  const auto& first = stored["cells"][0];
  ASSERT_EQ(first["status"], "ok") << first.dump();
  fs::copy_file(progress, dir / "kept.progress.json");

  auto [code, output] = run_shell(bench_command(out, " --resume"));
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("1 of 2 cells settled before"), std::string::npos) << output;
  EXPECT_NE(output.find(first["id"].get<std::string>() + ": ok in the interrupted run"), std::string::npos) << output;
  EXPECT_FALSE(fs::exists(progress));  // the document holds everything now
  auto doc = results::load_results(out);
  EXPECT_EQ(doc["run_id"], stored["header"]["run_id"]);
  EXPECT_EQ(doc["timestamp"], stored["header"]["timestamp"]);
  EXPECT_EQ(doc["command"], stored["header"]["command"]);  // without --resume
  ASSERT_EQ(doc["cells"].size(), 2u);
  for (const auto& cell : doc["cells"]) {
    EXPECT_EQ(cell["status"], "ok") << cell.dump();
    if (cell["id"] == first["id"]) {  // taken from the record, not measured again
      EXPECT_EQ(cell["samples"]["step_ms"]["values"], first["repetitions"][0]["step_ms"]);
    }
  }

  // The kept progress, offered to another command (another budget per repetition): refused.
  fs::copy_file(dir / "kept.progress.json", progress);
  auto [other_code, other_output] = run_shell(bench_command(out, " --budget-s 999 --resume"));
  EXPECT_NE(other_code, 0);
  EXPECT_NE(other_output.find(progress.string() + ": was written by another command"), std::string::npos)
      << other_output;
}

class BenchProgressFile : public ::testing::Test {
 protected:
  TempDir dir{"bench-progress"};
  fs::path path = dir / "doc.json.progress.json";
  nlohmann::json header = {{"run_id", "r1"},
                           {"command", {"fsdpp", "bench", "--preset", "smoke"}},
                           {"git", {{"commit", "abc1234"}, {"dirty", false}}},
                           {"machine", {{"fingerprint", "f00d"}}}};
  BenchCell a = smoke_cell("gpt2-tiny/unsharded/fp32/n1-gb8/ac0-det0");
  BenchCell b = smoke_cell("gpt2-tiny/unsharded/fp32/n1-gb8/ac0-det1");

  CellOutcome outcome(const BenchCell& cell, const std::string& status) {
    CellOutcome o;
    o.cell = cell;
    o.status = status;
    if (status == "ok")
      o.repetitions.push_back({{2.0, 3.0}, {{"format", "fsdpp.bench-cell"}}});
    else
      o.reason = "broken";
    return o;
  }

  void write(const nlohmann::json& doc) { std::ofstream(path) << doc.dump(); }

  std::string resume_error(const nlohmann::json& current) {
    try {
      BenchProgress::resume(path, current).finished({a, b});
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  }
};

TEST_F(BenchProgressFile, KeepsOkAndUnavailableCellsAndRunsFailedOnesAgain) {
  BenchProgress progress(path, header);
  progress.record(outcome(a, "failed"));
  progress.record(outcome(b, "ok"));
  auto finished = BenchProgress::resume(path, header).finished({a, b});
  ASSERT_EQ(finished.size(), 1u);
  const auto& kept = finished.at(b.id());
  EXPECT_EQ(kept.status, "ok");
  ASSERT_EQ(kept.repetitions.size(), 1u);
  EXPECT_EQ(kept.repetitions[0].step_ms, (std::vector<double>{2.0, 3.0}));
  EXPECT_EQ(kept.repetition_seconds, (std::vector<double>{0.005}));
  progress.record(outcome(a, "unavailable"));  // a cell recorded again replaces its entry
  finished = BenchProgress::resume(path, header).finished({a, b});
  EXPECT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished.at(a.id()).reason, "broken");
  progress.remove();
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(BenchProgressFile, AnotherCommitMachineOrUnknownFormatIsRefusedByName) {
  // Every refusal is "<the progress file>: <what is wrong>".
  auto refusal = [&](const nlohmann::json& current) {
    const std::string error = resume_error(current);
    EXPECT_EQ(error.rfind(path.string() + ": ", 0), 0u) << error;
    return error;
  };
  BenchProgress(path, header).record(outcome(a, "ok"));
  auto other_commit = header;
  other_commit["git"]["commit"] = "def5678";
  EXPECT_NE(refusal(other_commit).find(path.string() + ": was written by another commit"), std::string::npos);
  auto other_machine = header;
  other_machine["machine"]["fingerprint"] = "beef";
  EXPECT_NE(refusal(other_machine).find(path.string() + ": was written by another machine"), std::string::npos);
  EXPECT_EQ(resume_error(header), "(accepted)");

  write({{"format", "fsdpp.bench-progress"}, {"version", 2}, {"header", header}, {"cells", nlohmann::json::array()}});
  EXPECT_NE(refusal(header).find("version 2 is not understood"), std::string::npos);
  write({{"format", "fsdpp.results"}});
  EXPECT_NE(refusal(header).find("not an fsdpp.bench-progress file"), std::string::npos);
  write({{"format", "fsdpp.bench-progress"},
         {"version", 1},
         {"header", header},
         {"cells", {{{"id", "gpt2-tiny/no-such-cell"}, {"status", "ok"}}}}});
  EXPECT_NE(refusal(header).find("cell 'gpt2-tiny/no-such-cell' is not one this command selects"), std::string::npos);
  write({{"format", "fsdpp.bench-progress"},
         {"version", 1},
         {"header", header},
         {"cells", {{{"id", a.id()}, {"status", "ok"}, {"reason", ""}, {"repetitions", nlohmann::json::array()}}}}});
  EXPECT_NE(refusal(header).find("ok without repetitions"), std::string::npos);
  std::ofstream(path) << "{ not json";
  EXPECT_NE(refusal(header).find(path.string() + ": not JSON"), std::string::npos);
}

}  // namespace
}  // namespace fsdpp::harness
