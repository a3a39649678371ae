// `fsdpp results validate|compare|dashboard|append` through the real binary: exit codes
// (0 fine, 1 regression, 2 bad input) and one error line that names the file or flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/io/atomic_file.h"
#include "harness/testing/synthetic_results.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp {
namespace {

namespace fs = std::filesystem;
using harness::run_shell;
using harness::SyntheticCell;
using harness::TempDir;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kFsdpp = FSDPP_CLI_PATH;
constexpr const char* kMachine = "0123456789abcdef";

// Writes run `index` with one cell whose 15 step times center on `step_ms`.
fs::path write_run(const TempDir& dir, int index, double step_ms, const std::string& machine = kMachine) {
  json doc = harness::synthetic_document(machine, index);
  SyntheticCell cell;
  cell.step_ms = harness::noisy_samples(step_ms, 0.03, 15, 10 + index);
  doc["cells"].push_back(harness::synthetic_cell(cell));
  const fs::path file = dir / ("run" + std::to_string(index) + "-" + machine.substr(0, 4) + ".json");
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
  auto [code, output] = run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() +
                                  " --markdown " + (dir / "gate.md").string() + " --json " + (dir / "gate.json").string());
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
  EXPECT_EQ(run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() +
                      " --min-effect 0.5").first, 0);
  EXPECT_EQ(run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() +
                      " --alpha 1e-12").first, 0);
}

TEST(ResultsCli, AnotherMachineIsBadInputUnlessAllowed) {
  TempDir dir;
  auto base = write_run(dir, 0, 100, "fedcba9876543210"), now = write_run(dir, 1, 100);
  auto [code, output] = run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string());
  EXPECT_EQ(code, 2) << output;
  EXPECT_EQ(lines(output), 1u) << output;
  EXPECT_THAT(output, HasSubstr(base.string()));
  EXPECT_EQ(run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() +
                      " --allow-other-machine").first, 0);
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
  auto unknown = run_shell(kFsdpp + " results compare " + now.string() + " --baseline " + base.string() + " --alpah 0.1");
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
  EXPECT_THAT(bad.second, HasSubstr("fsdpp: error: " + (dir / "wrong.json").string()));
}

TEST(ResultsCli, AppendThenCompareAgainstTheHistoryWindow) {
  TempDir dir;
  const fs::path history = dir / "history";
  for (int i = 0; i < 4; ++i) {
    auto [code, output] = run_shell(kFsdpp + " results append " + write_run(dir, i, 100).string() + " --history " +
                                    history.string());
    ASSERT_EQ(code, 0) << output;
    EXPECT_THAT(output, HasSubstr((history / kMachine).string()));
  }
  auto again = run_shell(kFsdpp + " results append " + (dir / ("run0-" + std::string(kMachine).substr(0, 4) + ".json")).string() +
                         " --history " + history.string());
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
                        history.string()).first, 0);
  auto [code, output] = run_shell(kFsdpp + " results dashboard --history " + history.string() + " --out " +
                                  (dir / "page.html").string());
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(read_text(dir / "page.html"), HasSubstr("<tr class=\"regression\">"));
  auto missing = run_shell(kFsdpp + " results dashboard --history " + (dir / "nowhere").string() + " --out " +
                           (dir / "x.html").string());
  EXPECT_EQ(missing.first, 2) << missing.second;
  EXPECT_THAT(missing.second, HasSubstr("nowhere"));
}

}  // namespace
}  // namespace fsdpp
