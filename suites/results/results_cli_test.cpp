// `fsdpp results validate|compare|dashboard|append` through the real binary: exit codes
// (0 fine, 1 regression, 2 bad input) and one error line that names the file or flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/io/atomic_file.h"
#include "harness/testing/synthetic_results.h"
#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

namespace fs = std::filesystem;
using harness::run_shell;
using harness::SyntheticCell;
using harness::TempDir;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr const char* kCliMachine = "0123456789abcdef";

// Writes run `index` with one cell whose 15 step times center on `step_ms`.
fs::path write_run(const TempDir& dir, int index, double step_ms, const std::string& machine = kCliMachine) {
  json doc = harness::synthetic_document(machine, index);
  SyntheticCell cell;
  cell.step_ms = harness::noisy_samples(step_ms, 0.03, 15, 10 + index);
  doc["cells"].push_back(harness::synthetic_cell(cell));
  fs::path file = dir / ("run" + std::to_string(index) + "-" + machine.substr(0, 4) + ".json");
  io::write_file_atomic(file, doc.dump(2));
  return file;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

size_t lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

TEST(ResultsCli, CompareExitsZeroWithoutARegression) {
  TempDir dir;
  auto base = write_run(dir, 0, 100), now = write_run(dir, 1, 100);
  auto [code, output] = run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string());
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("0 regression(s)"));
}

TEST(ResultsCli, CompareExitsOneOnARegressionAndWritesBothReports) {
  TempDir dir;
  auto base = write_run(dir, 0, 100), now = write_run(dir, 1, 115);
  auto [code, output] =
      run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() + " --markdown " +
                (dir / "gate.md").string() + " --json " + (dir / "gate.json").string());
  EXPECT_EQ(code, 1) << output;
  EXPECT_THAT(output, HasSubstr("**REGRESSION**"));
  EXPECT_THAT(read_text(dir / "gate.md"), HasSubstr("**REGRESSION**"));
  const json parsed = json::parse(read_text(dir / "gate.json"));
  EXPECT_EQ(parsed["format"], "fsdpp.compare");
  EXPECT_EQ(parsed["regression"], true);
}

TEST(ResultsCli, MinEffectAndAlphaFlagsChangeTheVerdict) {
  TempDir dir;
  auto base = write_run(dir, 0, 100), now = write_run(dir, 1, 115);
  // Without either flag the same pair is a regression (exit 1): each flag below turns it into 0.
  EXPECT_EQ(run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string()).first, 1);
  EXPECT_EQ(
      run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() + " --min-effect 0.5")
          .first,
      0);
  EXPECT_EQ(
      run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() + " --alpha 1e-12").first,
      0);
}

TEST(ResultsCli, AnotherMachineIsBadInputUnlessAllowed) {
  TempDir dir;
  auto base = write_run(dir, 0, 100, "fedcba9876543210"), now = write_run(dir, 1, 100);
  auto [code, output] = run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string());
  EXPECT_EQ(code, 2) << output;
  EXPECT_EQ(lines(output), 1u) << output;
  EXPECT_THAT(output, HasSubstr(base.string()));
  EXPECT_EQ(
      run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() + " --allow-other-machine")
          .first,
      0);
}

TEST(ResultsCli, UnreadableDocumentsAreOneLineNamingTheFile) {
  TempDir dir;
  auto now = write_run(dir, 1, 100);
  io::write_file_atomic(dir / "broken.json", "{\"format\": \"fsdpp.results\", \"schema_version\": 1,");
  for (const std::string& bad : {(dir / "missing.json").string(), (dir / "broken.json").string()}) {
    auto [code, output] = run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + bad);
    EXPECT_EQ(code, 2) << output;
    EXPECT_EQ(lines(output), 1u) << output;
    EXPECT_THAT(output, StartsWith("fsdpp: error: "));
    EXPECT_THAT(output, HasSubstr(bad));
  }
}

TEST(ResultsCli, BaselineFlagsAreCheckedWithExitTwo) {
  TempDir dir;
  auto base = write_run(dir, 0, 100), now = write_run(dir, 1, 100);
  auto neither = run_shell(kFsdpp + " results compare " + now.string());
  EXPECT_EQ(neither.first, 2) << neither.second;
  EXPECT_THAT(neither.second, HasSubstr("--baseline"));
  auto both = run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() + " --history " +
                        dir.path().string());
  EXPECT_EQ(both.first, 2) << both.second;
  auto unknown =
      run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() + " --alpah 0.1");
  EXPECT_EQ(unknown.first, 2) << unknown.second;
  EXPECT_THAT(unknown.second, HasSubstr("--alpah"));
}

TEST(ResultsCli, ValidateReportsEachFile) {
  TempDir dir;
  auto good = write_run(dir, 0, 100);
  io::write_file_atomic(dir / "wrong.json", "{\"format\": \"fsdpp.results\", \"schema_version\": 7}");
  auto ok = run_shell(kFsdpp + " results validate " + good.string());
  EXPECT_EQ(ok.first, 0) << ok.second;
  EXPECT_THAT(ok.second, StartsWith("OK " + good.string()));
  auto bad = run_shell(kFsdpp + " results validate " + good.string() + " " + (dir / "wrong.json").string());
  EXPECT_EQ(bad.first, 2) << bad.second;
  EXPECT_EQ(lines(bad.second), 2u) << bad.second;
  EXPECT_THAT(bad.second, HasSubstr("OK " + good.string()));  // the good file is still reported
  EXPECT_THAT(bad.second, HasSubstr("fsdpp: error: " + (dir / "wrong.json").string()));
}

TEST(ResultsCli, AppendThenCompareAgainstTheHistoryWindow) {
  TempDir dir;
  const fs::path history = dir / "history";
  for (int i = 0; i < 4; ++i) {
    auto [code, output] =
        run_shell(kFsdpp + " results append " + write_run(dir, i, 100).string() + " --history " + history.string());
    ASSERT_EQ(code, 0) << output;
    EXPECT_THAT(output, HasSubstr((history / kCliMachine).string()));
  }
  auto again = run_shell(kFsdpp + " results append " +
                         (dir / ("run0-" + std::string(kCliMachine).substr(0, 4) + ".json")).string() + " --history " +
                         history.string());
  EXPECT_EQ(again.first, 2) << again.second;  // history is append-only

  auto slow = write_run(dir, 4, 120);
  auto [code, output] = run_shell(kFsdpp + " results compare " + slow.string() + " --history " + history.string() +
                                  " --window 3 --json " + (dir / "gate.json").string());
  EXPECT_EQ(code, 1) << output;
  EXPECT_EQ(json::parse(read_text(dir / "gate.json"))["baseline"]["sources"].size(), 3u);

  auto none = run_shell(kFsdpp + " results compare " + write_run(dir, 5, 100, "aaaaaaaaaaaaaaaa").string() +
                        " --history " + history.string());
  EXPECT_EQ(none.first, 2) << none.second;
  EXPECT_THAT(none.second, HasSubstr(history.string()));
}

TEST(ResultsCli, DashboardWritesOnePage) {
  TempDir dir;
  const fs::path history = dir / "history";
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(run_shell(kFsdpp + " results append " + write_run(dir, i, 100 + 20 * i).string() + " --history " +
                        history.string())
                  .first,
              0);
  auto [code, output] =
      run_shell(kFsdpp + " results dashboard --history " + history.string() + " --out " + (dir / "page.html").string());
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(read_text(dir / "page.html"), HasSubstr("<tr class=\"regression\">"));
  auto missing = run_shell(kFsdpp + " results dashboard --history " + (dir / "nowhere").string() + " --out " +
                           (dir / "x.html").string());
  EXPECT_EQ(missing.first, 2) << missing.second;
  EXPECT_THAT(missing.second, HasSubstr("nowhere"));
}

// ci/gate.sh's orchestration, with the real `fsdpp results` and a stand-in `fsdpp bench`
// that logs its flags and writes a prepared document: no regression, no rerun; a
// regression is rerun with a --filter of exactly its cell and stands only when the rerun
// is slow too.
struct GateScript {
  TempDir dir;
  fs::path fake = dir / "fsdpp";
  fs::path bench_log = dir / "bench-flags.txt";

  explicit GateScript(const fs::path& rerun_document) {
    io::write_file_atomic(fake,
                          "#!/bin/sh\n"
                          "if [ \"$1\" = bench ]; then\n"
                          "  echo \"$@\" >> '" +
                              bench_log.string() +
                              "'\n"
                              "  while [ $# -gt 0 ]; do [ \"$1\" = --out ] && cp '" +
                              rerun_document.string() +
                              "' \"$2\"; shift; done\n"
                              "  exit 0\n"
                              "fi\n"
                              "exec " +
                              kFsdpp + " \"$@\"\n");
    fs::permissions(fake, fs::perms::owner_all);
  }
  std::pair<int, std::string> run(const fs::path& now, const fs::path& base) const {
    return run_shell(std::string(FSDPP_SOURCE_DIR) + "/ci/gate.sh --fsdpp " + fake.string() + " --new " + now.string() +
                     " --baseline " + base.string() + " --report " + (dir / "gate").string() +
                     " --bench-flags '--preset smoke --repetitions 3'");
  }
};

TEST(GateScript, ARegressionStandsOnlyWhenTheRerunOfItsCellRegressesToo) {
  TempDir docs;
  const auto base = write_run(docs, 0, 100), same = write_run(docs, 1, 100), slow = write_run(docs, 2, 120),
             slow_again = write_run(docs, 3, 121), normal_again = write_run(docs, 4, 100);
  {
    GateScript gate(normal_again);
    auto [code, output] = gate.run(same, base);
    EXPECT_EQ(code, 0) << output;
    EXPECT_FALSE(fs::exists(gate.bench_log)) << "no regression, no rerun";
  }
  {
    GateScript gate(normal_again);  // a stall: the rerun is back to normal
    auto [code, output] = gate.run(slow, base);
    EXPECT_EQ(code, 0) << output;
    EXPECT_THAT(output, HasSubstr("the rerun did not confirm them"));
    EXPECT_EQ(read_text(gate.bench_log),
              "bench --preset smoke --repetitions 3 --filter ^(gpt2-mini/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0)$ "
              "--out " +
                  (gate.dir / "gate.rerun.json").string() + "\n");
    auto report = json::parse(read_text(gate.dir / "gate.json"));
    EXPECT_EQ(report["regression"], false);
    EXPECT_EQ(report["confirmed_by"].size(), 1u);
    EXPECT_EQ(json::parse(read_text(gate.dir / "gate.first.json"))["regression"], true);
  }
  {
    GateScript gate(slow_again);  // a real regression: slow again
    auto [code, output] = gate.run(slow, base);
    EXPECT_EQ(code, 1) << output;
    EXPECT_THAT(output, HasSubstr("REGRESSION confirmed by the rerun"));
    EXPECT_THAT(read_text(gate.dir / "gate.md"), HasSubstr("confirmed by the rerun (ratio 1.2"));
  }
}

}  // namespace
}  // namespace fsdpp
