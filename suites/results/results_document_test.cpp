// fsdpp.results v1 (results/README.md): documents round-trip, every violation names its
// JSON pointer, version 0 migrates with its raw samples, newer versions and other formats
// are refused in one line, Google Benchmark's NaN/Infinity parse, history is append-only
// and oldest first, and the machine fingerprint is stable and hostname-free.
#include "harness/results/results_document.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/utsname.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "harness/results/json_schema.h"
#include "harness/testing/results_samples.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::results {
namespace {

using harness::results_fixture;
using harness::sample_results_cell;
using harness::sample_results_document;
using harness::TempDir;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::filesystem::path& file, const std::string& text) { std::ofstream(file) << text; }

// The message validate_results throws for `doc`, or "valid".
std::string validation_error(const json& doc) {
  try {
    validate_results(doc, "doc.json");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "valid";
}

std::string load_error(const std::filesystem::path& file) {
  try {
    load_results(file);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "loaded";
}

TEST(ResultsDocument, ValidDocumentRoundTripsThroughWriteAndLoad) {
  TempDir dir("results");
  const json doc = sample_results_document({sample_results_cell("gpt2-mini/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0"),
                                            sample_results_cell("gpt2-mini/fsdp-no_shard/fp32/n2/pf1-ac0-off0-det0")});
  const auto file = dir / "sub" / "run.json";

  write_results(file, doc);

  EXPECT_EQ(load_results(file), doc);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "sub"), {}), 1);  // no temporary left
}

TEST(ResultsDocument, EachViolationIsRejectedNamingItsJsonPointer) {
  struct Case {
    const char* what;
    std::function<void(json&)> break_it;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"missing required field", [](json& d) { d["cells"][0]["config"].erase("seq_len"); },
       "doc.json: /cells/0/config/seq_len: required property is missing"},
      {"missing top-level field", [](json& d) { d.erase("run_id"); },
       "doc.json: /run_id: required property is missing"},
      {"wrong type", [](json& d) { d["cells"][0]["config"]["world_size"] = "2"; },
       "doc.json: /cells/0/config/world_size: expected integer, got string \"2\""},
      {"bad system", [](json& d) { d["cells"][0]["system"] = "fsdp"; },
       "doc.json: /cells/0/system: expected one of \"fsdpp\", \"pytorch_single\", \"pytorch_ddp\", "
       "\"pytorch_fsdp2\", got string \"fsdp\""},
      {"bad status", [](json& d) { d["cells"][0]["status"] = "skipped"; },
       "doc.json: /cells/0/status: expected one of \"ok\", \"unavailable\", \"failed\", got string \"skipped\""},
      {"bad strategy", [](json& d) { d["cells"][0]["config"]["strategy"] = "zero3"; },
       "doc.json: /cells/0/config/strategy: expected one of"},
      {"bad mixed precision", [](json& d) { d["cells"][0]["config"]["mixed_precision"] = "fp8"; },
       "doc.json: /cells/0/config/mixed_precision: expected one of \"fp32\", \"bf16\", \"fp16\""},
      {"bad better", [](json& d) { d["cells"][0]["metrics"]["step_ms_median"]["better"] = "smaller"; },
       "doc.json: /cells/0/metrics/step_ms_median/better: expected one of \"lower\", \"higher\", \"none\""},
      {"metric without unit", [](json& d) { d["cells"][0]["metrics"]["tokens_per_s"].erase("unit"); },
       "doc.json: /cells/0/metrics/tokens_per_s/unit: required property is missing"},
      {"sample without unit", [](json& d) { d["cells"][0]["samples"]["step_ms"].erase("unit"); },
       "doc.json: /cells/0/samples/step_ms/unit: required property is missing"},
      {"empty unit", [](json& d) { d["cells"][0]["metrics"]["tokens_per_s"]["unit"] = ""; },
       "doc.json: /cells/0/metrics/tokens_per_s/unit: expected a string of at least 1 characters"},
      {"non-ok cell without reason", [](json& d) { d["cells"][0]["status"] = "failed"; },
       "doc.json: /cells/0/reason: required property is missing (when status is not ok)"},
      {"ok cell without its headline metric", [](json& d) { d["cells"][0]["metrics"].erase("step_ms_median"); },
       "doc.json: /cells/0/metrics/step_ms_median: required property is missing (when status is ok)"},
      {"non-finite metric",
       [](json& d) { d["cells"][0]["metrics"]["step_ms_median"]["value"] = std::numeric_limits<double>::infinity(); },
       "doc.json: /cells/0/metrics/step_ms_median/value: expected number or null, got Infinity"},
      {"sample value not a number", [](json& d) { d["cells"][0]["samples"]["step_ms"]["values"][1] = nullptr; },
       "doc.json: /cells/0/samples/step_ms/values/1: expected number, got null"},
      {"wrong format", [](json& d) { d["format"] = "fsdpp.bench-cell"; },
       "doc.json: /format: expected \"fsdpp.results\", got string \"fsdpp.bench-cell\""},
      {"wrong schema_version", [](json& d) { d["schema_version"] = 0; }, "doc.json: /schema_version: expected 1"},
      {"unknown top-level field", [](json& d) { d["note"] = "x"; }, "doc.json: /note: unexpected property"},
      {"bad run id", [](json& d) { d["run_id"] = "run-1"; }, "doc.json: /run_id: expected a string matching"},
      {"timestamp not UTC", [](json& d) { d["timestamp"] = "2026-11-22T19:00:00+01:00"; },
       "doc.json: /timestamp: expected a string matching"},
      {"bad fingerprint", [](json& d) { d["machine"]["fingerprint"] = "XYZ"; },
       "doc.json: /machine/fingerprint: expected a string matching"},
      {"bad preset", [](json& d) { d["preset"] = "huge"; }, "doc.json: /preset: expected one of \"smoke\""},
      {"duplicate cell id", [](json& d) { d["cells"].push_back(d["cells"][0]); },
       "doc.json: /cells/1/id: \"a/b\" repeats /cells/0/id (cell ids must be unique)"},
  };
  const json valid = sample_results_document({sample_results_cell("a/b")});
  ASSERT_EQ(validation_error(valid), "valid");
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    json doc = valid;
    c.break_it(doc);
    EXPECT_THAT(validation_error(doc), StartsWith(c.message));
  }
}

TEST(ResultsDocument, NonOkCellWithReasonAndNoMeasurementsIsValid) {
  json cell = sample_results_cell("gpt2-mini/pytorch_fsdp2/fp32/n2/pf1-ac0-off0-det0");
  cell["system"] = "pytorch_fsdp2";
  cell["status"] = "unavailable";
  cell["reason"] = "PyTorch 1.13 FSDP is CUDA-only";
  cell["samples"] = json::object();
  cell["metrics"] = json::object();
  EXPECT_EQ(validation_error(sample_results_document({cell})), "valid");
}

TEST(ResultsDocument, WriteRefusesAnInvalidDocumentAndLeavesNoFile) {
  TempDir dir("results");
  json doc = sample_results_document({sample_results_cell("a")});
  doc["cells"][0]["metrics"]["tokens_per_s"].erase("unit");

  try {
    write_results(dir / "run.json", doc);
    FAIL() << "write_results accepted an invalid document";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/cells/0/metrics/tokens_per_s/unit: required property is missing"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "run.json"));
}

TEST(ResultsMigration, VersionZeroGpuRunBecomesAValidV1DocumentKeepingRawSamples) {
  const json v0 = json::parse(read_text(results_fixture("v0_gpu.json")));
  ASSERT_EQ(v0["cells"].size(), 2u);

  const json doc = load_results(results_fixture("v0_gpu.json"));  // migrates and validates

  EXPECT_EQ(doc["schema_version"], 1);
  EXPECT_EQ(doc["timestamp"], "2026-11-22T16:36:25Z");
  EXPECT_EQ(doc["run_id"], "20261122T163625Z-8bf9808f");
  EXPECT_EQ(doc["migrated_from"], json({{"schema_version", 0}, {"run_id", v0["run_id"]}}));
  EXPECT_EQ(doc["git"], json({{"commit", "7ea9507"}, {"dirty", true}}));
  EXPECT_EQ(doc["command"], json({"ci/gpu_bench.sh"}));
  EXPECT_EQ(doc["machine"]["gpu_model"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(doc["machine"]["gpu_memory_bytes"], int64_t{81559} << 20);
  EXPECT_EQ(doc["machine"]["driver"], "580.159.04");
  EXPECT_TRUE(doc["machine"]["hostname"].is_null());
  EXPECT_EQ(doc["machine"]["fingerprint"], machine_fingerprint(doc["machine"]));

  const json& cells = doc["cells"];
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_EQ(cells[0]["id"], "gpt2-124M/fsdp-full_shard/bf16/n1/pf1-ac0-off0-det0");
  EXPECT_EQ(cells[1]["id"], "gpt2-124M/pytorch_fsdp2/bf16/n1/pf1-ac0-off0-det0");
  EXPECT_EQ(cells[2]["id"], "gpt2-124M/fsdp-full_shard/bf16/n1/pf1-ac1-off0-det0");
  EXPECT_EQ(cells[3]["id"], "gpt2-124M/pytorch_fsdp2/bf16/n1/pf1-ac1-off0-det0");
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE("v0 cell " + std::to_string(i));
    const json& ours = cells[2 * i];
    const json& peer = cells[2 * i + 1];
    EXPECT_EQ(ours["system"], "fsdpp");
    EXPECT_EQ(peer["system"], "pytorch_fsdp2");
    EXPECT_EQ(peer["config"]["strategy"], "fsdp2");
    EXPECT_EQ(ours["status"], "ok");
    EXPECT_EQ(peer["status"], "ok");
    EXPECT_EQ(ours["samples"]["step_ms"]["values"], v0["cells"][i]["fsdpp"]["step_ms"]);
    EXPECT_EQ(peer["samples"]["step_ms"]["values"], v0["cells"][i]["pytorch_fsdp2"]["step_ms"]);
    EXPECT_EQ(ours["samples"]["step_ms"]["unit"], "ms");
    EXPECT_EQ(ours["metrics"]["tokens_per_s"],
              json({{"value", v0["cells"][i]["fsdpp"]["tokens_per_s"]}, {"unit", "tokens/s"}, {"better", "higher"}}));
    EXPECT_EQ(peer["metrics"]["step_ms_median"]["value"], v0["cells"][i]["pytorch_fsdp2"]["step_ms_median"]);
    EXPECT_EQ(ours["metrics"]["mfu"]["value"], v0["cells"][i]["mfu"]["fsdpp"]);
    EXPECT_EQ(ours["metrics"]["peak_bytes_per_rank"]["value"],
              v0["cells"][i]["fsdpp"]["memory_bytes"]["peak_allocated"]);
    // The v0 fsdpp record's parameter count double-counted the tied embedding.
    EXPECT_EQ(ours["config"]["parameters"], 124439808);
    EXPECT_EQ(ours["config"]["global_batch"], 8);
    EXPECT_EQ(ours["config"]["timed_steps"], 10);
    EXPECT_EQ(ours["config"]["device"], "cuda");
  }
}

TEST(ResultsMigration, VersionZeroCellWithoutPyTorchRecordBecomesAnUnavailableCell) {
  json v0 = json::parse(read_text(results_fixture("v0_gpu.json")));
  v0["cells"][1]["pytorch_fsdp2"] = nullptr;

  const json doc = migrate_to_current(v0, "v0.json");

  ASSERT_EQ(validation_error(doc), "valid");
  EXPECT_EQ(doc["cells"][3]["status"], "unavailable");
  EXPECT_THAT(doc["cells"][3]["reason"].get<std::string>(), HasSubstr("no PyTorch FSDP2 record"));
}

TEST(ResultsMigration, VersionZeroMissingAFieldNamesItsPointer) {
  json v0 = json::parse(read_text(results_fixture("v0_gpu.json")));
  v0["cells"][1]["config"].erase("seq_len");
  try {
    migrate_to_current(v0, "v0.json");
    FAIL() << "migrated a v0 cell without seq_len";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("v0.json: /cells/1/config/seq_len: missing"));
  }
}

TEST(ResultsReader, NewerSchemaVersionIsRefusedInOneClearLine) {
  TempDir dir("results");
  json doc = sample_results_document({sample_results_cell("a")});
  doc["schema_version"] = 2;
  doc["something_new"] = true;
  write_text(dir / "v2.json", doc.dump());

  EXPECT_EQ(load_error(dir / "v2.json"),
            (dir / "v2.json").string() + ": schema_version 2 is newer than this fsdpp understands (1): upgrade fsdpp");
}

TEST(ResultsReader, OtherFormatsAreRefused) {
  TempDir dir("results");
  write_text(dir / "selfcheck.json", R"({"format": "fsdpp.selfcheck", "version": 1, "rows": []})");
  write_text(dir / "plain.json", R"({"benchmarks": []})");
  write_text(dir / "array.json", "[1, 2]");

  EXPECT_EQ(load_error(dir / "selfcheck.json"),
            (dir / "selfcheck.json").string() +
                ": format \"fsdpp.selfcheck\" is not \"fsdpp.results\": not a results "
                "document");
  EXPECT_THAT(load_error(dir / "plain.json"), HasSubstr("no \"format\" field"));
  EXPECT_THAT(load_error(dir / "array.json"), HasSubstr("expected a JSON object"));
  EXPECT_THAT(load_error(dir / "missing.json"), HasSubstr("missing.json: cannot open"));
}

TEST(LenientJson, GoogleBenchmarkNonFiniteTokensBecomeNullOutsideStrings) {
  const json parsed = parse_json_lenient(
      R"({"a": NaN, "b": [Infinity, -Infinity, 1.5], "NaN": "NaN and -Infinity stay \"Infinity\"", "c": -1})",
      "bench.json");
  EXPECT_TRUE(parsed["a"].is_null());
  EXPECT_EQ(parsed["b"], json::parse("[null, null, 1.5]"));
  EXPECT_EQ(parsed["NaN"], "NaN and -Infinity stay \"Infinity\"");
  EXPECT_EQ(parsed["c"], -1);
}

TEST(LenientJson, MalformedTextNamesTheSource) {
  EXPECT_THROW(
      {
        try {
          parse_json_lenient("{\"a\": NaNx}", "bench.json");
        } catch (const std::runtime_error& e) {
          EXPECT_THAT(e.what(), StartsWith("bench.json: not valid JSON"));
          throw;
        }
      },
      std::runtime_error);
}

TEST(LenientJson, LoadResultsReadsADocumentWithANaNMetricAsNull) {
  TempDir dir("results");
  json doc = sample_results_document({sample_results_cell("a")});
  doc["cells"][0]["metrics"]["mfu"] = {{"value", 0.5}, {"unit", "fraction"}, {"better", "higher"}};
  std::string text = doc.dump();
  const std::string value = "\"value\":0.5";
  ASSERT_NE(text.find(value), std::string::npos);
  text.replace(text.find(value), value.size(), "\"value\":NaN");
  write_text(dir / "gbench.json", text);

  EXPECT_TRUE(load_results(dir / "gbench.json")["cells"][0]["metrics"]["mfu"]["value"].is_null());
}

// "2026-11-22T19:00:00Z" -> "20261122T190000Z", the run id's prefix.
std::string compact_time(std::string timestamp) {
  for (char drop : {'-', ':'}) timestamp.erase(std::remove(timestamp.begin(), timestamp.end(), drop), timestamp.end());
  return timestamp;
}

// A document of this machine at `timestamp`.
json run_at(const std::string& timestamp, const std::string& run_hex) {
  json doc = sample_results_document({sample_results_cell("a")});
  doc["timestamp"] = timestamp;
  doc["run_id"] = compact_time(timestamp) + "-" + run_hex;
  return doc;
}

TEST(ResultsHistory, AppendNeverOverwritesAndLoadReturnsOldestFirst) {
  TempDir dir("history");
  const json newer = run_at("2026-11-22T19:00:00Z", "00000001");
  const json older = run_at("2026-11-21T08:30:00Z", "ffffffff");
  const std::string fingerprint = newer["machine"]["fingerprint"];

  const auto newer_path = append_to_history(dir.path(), newer);
  append_to_history(dir.path(), older);

  EXPECT_EQ(newer_path, dir / fingerprint / "20261122T190000Z-00000001.json");
  json changed = newer;
  changed["cells"][0]["metrics"]["step_ms_median"]["value"] = 99.0;
  try {
    append_to_history(dir.path(), changed);
    FAIL() << "append_to_history overwrote " << newer_path;
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("exists already: history is append-only"));
  }
  const auto history = load_history(dir.path(), fingerprint);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0], older);
  EXPECT_EQ(history[1], newer);  // unchanged by the refused append
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / fingerprint), {}), 2);  // no temporaries
  EXPECT_TRUE(load_history(dir.path(), "0123456789abcdef").empty());
}

TEST(ResultsHistory, LoadMigratesVersionZeroDocuments) {
  TempDir dir("history");
  const json migrated = load_results(results_fixture("v0_gpu.json"));
  const std::string fingerprint = migrated["machine"]["fingerprint"];
  std::filesystem::create_directories(dir / fingerprint);
  std::filesystem::copy_file(results_fixture("v0_gpu.json"), dir / fingerprint / "gpu-run.json");
  json later = run_at("2026-11-23T00:00:00Z", "0000abcd");
  later["machine"] = migrated["machine"];
  append_to_history(dir.path(), later);

  const auto history = load_history(dir.path(), fingerprint);

  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0], migrated);
  EXPECT_EQ(history[1]["timestamp"], "2026-11-23T00:00:00Z");
}

TEST(MachineInfo, FingerprintIsStableAndIgnoresHostnameAndMemoryJitter) {
  const json first = machine_info();
  const json second = machine_info();
  ASSERT_EQ(first["fingerprint"], second["fingerprint"]);
  EXPECT_EQ(first["fingerprint"].get<std::string>().size(), 16u);

  json renamed = first;
  renamed["hostname"] = "another-host";
  EXPECT_EQ(machine_fingerprint(renamed), first["fingerprint"]);
  json jitter = first;
  jitter["memory_bytes"] = first["memory_bytes"].get<int64_t>() + (int64_t{3} << 20);
  EXPECT_EQ(machine_fingerprint(jitter), first["fingerprint"]);
  json other_cpu = first;
  other_cpu["cpu_model"] = "Some Other CPU";
  EXPECT_NE(machine_fingerprint(other_cpu), first["fingerprint"]);
  json other_torch = first;
  other_torch["libtorch"] = "9.9.9";
  EXPECT_NE(machine_fingerprint(other_torch), first["fingerprint"]);
}

// Each field against the kernel's own answer, read another way than machine_info reads it.
TEST(MachineInfo, DescribesThisHost) {
  const json machine = machine_info();
  EXPECT_EQ(machine["libtorch"], TORCH_VERSION);
  EXPECT_EQ(machine["cpu_cores"].get<long>(), sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_EQ(machine["memory_bytes"].get<int64_t>(),
            static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE)));
  utsname host{};
  ASSERT_EQ(uname(&host), 0);
  EXPECT_EQ(machine["hostname"], std::string(host.nodename));
  ASSERT_TRUE(machine["os"].is_string());
  EXPECT_FALSE(machine["os"].get<std::string>().empty());
  EXPECT_THAT(machine["compiler"].get<std::string>(), HasSubstr(__VERSION__));
#if !FSDPP_WITH_CUDA
  EXPECT_EQ(machine["gpu_count"], 0);
  EXPECT_TRUE(machine["gpu_model"].is_null());
  EXPECT_TRUE(machine["cuda"].is_null());
#endif
}

TEST(NewDocument, IsValidOnceItHasCellsAndHasAFreshRunId) {
  json doc = new_document({"fsdpp", "bench", "--preset", "smoke"}, "smoke");
  const json other = new_document({"fsdpp", "bench"}, "");

  EXPECT_EQ(doc["cells"], json::array());
  EXPECT_TRUE(other["preset"].is_null());
  EXPECT_NE(doc["run_id"], other["run_id"]);
  EXPECT_EQ(doc["run_id"].get<std::string>().substr(0, 17), compact_time(doc["timestamp"]) + "-");
  doc["cells"].push_back(sample_results_cell("a"));
  EXPECT_EQ(validation_error(doc), "valid");
  EXPECT_EQ(validation_error(other), "valid");  // no cells is a valid (empty) run
}

TEST(NewDocument, TakesTheCommitFromTheEnvironmentWhereCiSetsIt) {
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  ::setenv("FSDPP_COMMIT", commit.c_str(), 1);
  ::setenv("FSDPP_DIRTY", "1", 1);
  const json git = new_document({"fsdpp"}, "")["git"];
  ::unsetenv("FSDPP_COMMIT");
  ::unsetenv("FSDPP_DIRTY");

  EXPECT_EQ(git, json({{"commit", commit}, {"dirty", true}}));
  EXPECT_TRUE(new_document({"fsdpp"}, "")["git"]["dirty"].is_null());  // unknown without git status
}

TEST(NewDocument, BuiltFromAGitCheckoutRecordsItsHeadCommit) {
  if (!std::filesystem::exists(harness::source_tree_file(".git")))
    GTEST_SKIP() << "the source tree is not a git checkout";
  ::unsetenv("FSDPP_COMMIT");
  const std::string commit = new_document({"fsdpp"}, "")["git"]["commit"];
  EXPECT_EQ(commit.size(), 40u) << commit;
  EXPECT_EQ(commit.find_first_not_of("0123456789abcdef"), std::string::npos) << commit;
  // Its HEAD, as git resolves it (where git is installed: the document reads .git itself).
  auto [code, head] =
      harness::run_shell("(git -C '" + harness::source_tree_file("").string() + "' rev-parse HEAD 2>/dev/null)");
  if (code == 0) {
    EXPECT_EQ(commit + "\n", head);
  }
}

TEST(ResultsSchema, SchemaFileIsJsonUsingOnlySupportedKeywordsAndMatchesTheEmbeddedCopy) {
  const auto file = harness::source_tree_file("results/schema/v1.json");
  const json schema = json::parse(read_text(file));  // strict JSON

  EXPECT_NO_THROW(JsonSchema(schema, file.string()));  // unknown keywords would throw
  EXPECT_EQ(json::parse(results_schema_text()), schema) << "rebuild: the embedded schema is stale";
  EXPECT_EQ(schema["properties"]["schema_version"]["const"], kSchemaVersion);
  EXPECT_EQ(schema["properties"]["format"]["const"], kFormat);
}

}  // namespace
}  // namespace fsdpp::results
