// `fsdpp data prepare` writes shards that `fsdpp eval` reads, prints a one-line summary,
// and turns every bad input into one "fsdpp: error:" line naming it and exit code 1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "core/data/data_manifest.h"
#include "core/data/token_dataset.h"
#include "core/models/generate.h"
#include "core/models/gpt2.h"
#include "core/models/hf_checkpoint.h"
#include "harness/testing/assets.h"
#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

namespace fs = std::filesystem;
using harness::run_shell;
using harness::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

fs::path gpt2_assets() { return harness::test_asset("gpt2"); }

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// Three documents (one .txt, two JSONL lines) and a file of another type.
void write_tree(const fs::path& in) {
  write(in / "a.txt", "The quick brown fox jumps over the lazy dog. It was a sunny day and the dog slept.");
  write(in / "b.jsonl",
        "{\"text\": \"A second document, long enough for a window or two.\"}\n"
        "{\"text\": \"And a third one, shorter.\", \"id\": 3}\n");
  write(in / "notes.csv", "x,y\n");
}

std::string prepare_command(const fs::path& in, const fs::path& out, const std::string& extra = "") {
  return kFsdpp + " data prepare --input " + in.string() + " --output " + out.string() + " --tokenizer " +
         gpt2_assets().string() + extra;
}

// Bad usage or input: exit 2 (README, exit codes).
void expect_one_error_line(const std::pair<int, std::string>& result, const std::string& expected) {
  const auto& [code, output] = result;
  EXPECT_EQ(code, 2) << output;
  EXPECT_THAT(output, StartsWith("fsdpp: error: "));
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
  EXPECT_THAT(output, HasSubstr(expected));
}

TEST(DataPrepareCommand, WritesShardsAndAManifestAndPrintsASummary) {
  ASSERT_TRUE(fs::exists(gpt2_assets() / "encoder.json")) << "run bash ci/fetch_assets.sh";
  TempDir dir;
  write_tree(dir / "in");
  auto [code, output] = run_shell(prepare_command(dir / "in", dir / "out", " --eval-fraction 0.34 --workers 2"));
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("data prepare: 100%"));  // not a terminal: progress by tenths
  EXPECT_THAT(output, HasSubstr("prepared 3 documents: train "));
  EXPECT_THAT(output, HasSubstr("1 files skipped"));
  const auto m = data::read_data_manifest(dir / "out");
  EXPECT_EQ(m.train_documents, 2);
  EXPECT_EQ(m.eval_documents, 1);
  EXPECT_TRUE(fs::exists(dir / "out" / "train_000000.tok"));
  EXPECT_TRUE(fs::exists(dir / "out" / "eval_000000.tok"));
}

// Without --json-key, every string of a JSON/YAML record is a document, metadata included: a
// file whose documents are many and mostly tiny gets one line (stderr) naming it, its count
// and the tiny ones' mean size, and the key whose strings are longest; a file of long texts,
// a file of few strings and a run with --json-key get none.
TEST(DataPrepareCommand, SuggestsJsonKeyWhenAFileYieldsManyTinyDocuments) {
  TempDir dir;
  std::string records, texts;
  const std::string body(150, 'w');  // a 150-byte document
  for (int i = 0; i < 10; ++i) {
    records += R"({"id": "doc-)" + std::to_string(i) + R"(", "lang": "english", "text": ")" + body + "\"}\n";
    texts += R"({"text": ")" + body + "\"}\n";
  }
  write(dir / "in" / "a_records.jsonl", records);  // 30 documents, 20 of them tiny: 10 x 5 bytes, 10 x 7
  write(dir / "in" / "b_meta.yaml",
        "- {name: n1}\n- {name: n2}\n- {name: n3}\n- {name: n4}\n"
        "- {name: n5}\n- {name: n6}\n- {name: n7}\n- {name: n8}\n");  // 8 tiny
  write(dir / "in" / "c_texts.jsonl", texts);                         // 10 long documents
  write(dir / "in" / "d_few.json", R"(["a", "b", "c"])");             // 3 tiny: too few to say anything
  auto [code, output] = run_shell(prepare_command(dir / "in", dir / "out"));
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("prepared 51 documents"));
  const std::string expected = "data prepare: note: " + (dir / "in" / "a_records.jsonl").string() +
                               " yields 30 documents, 20 of them under 64 bytes (mean 6 bytes): every string value is "
                               "a document; --json-key text keeps only the text under \"text\" (its strings: mean "
                               "150 bytes) (1 more files alike)\n";
  EXPECT_THAT(output, HasSubstr(expected));
  size_t notes = 0;
  for (size_t at = output.find("note:"); at != std::string::npos; at = output.find("note:", at + 1)) ++notes;
  EXPECT_EQ(notes, 1U) << output;

  auto [keyed_code, keyed_output] = run_shell(prepare_command(dir / "in", dir / "keyed", " --json-key text"));
  ASSERT_EQ(keyed_code, 0) << keyed_output;
  EXPECT_THAT(keyed_output, HasSubstr("prepared 20 documents"));
  EXPECT_THAT(keyed_output, Not(HasSubstr("note:")));

  fs::remove(dir / "in" / "a_records.jsonl");
  fs::remove(dir / "in" / "b_meta.yaml");
  auto [long_code, long_output] = run_shell(prepare_command(dir / "in", dir / "long"));
  ASSERT_EQ(long_code, 0) << long_output;
  EXPECT_THAT(long_output, HasSubstr("prepared 13 documents"));
  EXPECT_THAT(long_output, Not(HasSubstr("note:")));
}

TEST(DataPrepareCommand, ItsShardsAreReadByEvalAsAPatternOrACommaList) {
  TempDir dir;
  write_tree(dir / "in");
  ASSERT_EQ(run_shell(prepare_command(dir / "in", dir / "out", " --shard-tokens 16")).first, 0);
  models::Gpt2Config c;
  c.n_embd = 16, c.n_layer = 1, c.n_head = 2, c.n_positions = 32;  // GPT-2's vocabulary, tiny body
  torch::manual_seed(1);
  models::save_pretrained(models::build_causal_lm(c.to_json(), "gpt2"), dir / "model");

  const std::string pattern = (dir / "out" / "train_*.tok").string();
  // stdout alone: the JSON (stderr's progress lines hold timings).
  auto [code, output] = run_shell("(" + kFsdpp + " eval --model " + (dir / "model").string() + " --data '" + pattern +
                                  "' --seq-len 8 --json 2>/dev/null)");
  ASSERT_EQ(code, 0) << output;
  auto dataset = data::TokenDataset::open(pattern);
  ASSERT_GT(dataset.files().size(), 1u);
  auto expected = models::evaluate(models::load_pretrained(dir / "model"), dataset.tokens(0, dataset.num_tokens()), 8);
  EXPECT_NEAR(nlohmann::json::parse(output)["loss"].get<double>(), expected.loss, 1e-6);

  std::string list;
  for (const auto& f : dataset.files()) list += (list.empty() ? "" : ",") + f.string();
  auto [list_code, list_output] = run_shell("(" + kFsdpp + " eval --model " + (dir / "model").string() + " --data " +
                                            list + " --seq-len 8 --json 2>/dev/null)");
  ASSERT_EQ(list_code, 0) << list_output;
  EXPECT_EQ(list_output, output);
}

TEST(DataPrepareCommand, MissingTokenizerIsOneErrorLine) {
  TempDir dir;
  write_tree(dir / "in");
  expect_one_error_line(
      run_shell(kFsdpp + " data prepare --input " + (dir / "in").string() + " --output " + (dir / "out").string()),
      "--tokenizer is required");
}

TEST(DataPrepareCommand, NonexistentInputIsOneErrorLineNamingThePath) {
  TempDir dir;
  expect_one_error_line(run_shell(prepare_command(dir / "nothing", dir / "out")),
                        (dir / "nothing").string() + ": no such file or directory");
}

TEST(DataPrepareCommand, BadJsonIsOneErrorLineNamingTheFile) {
  TempDir dir;
  write_tree(dir / "in");
  write(dir / "in" / "broken.json", "{\"text\": ");
  expect_one_error_line(run_shell(prepare_command(dir / "in", dir / "out")),
                        (dir / "in" / "broken.json").string() + ": invalid JSON");
}

TEST(DataPrepareCommand, EvalFractionOneIsOneErrorLine) {
  TempDir dir;
  write_tree(dir / "in");
  expect_one_error_line(run_shell(prepare_command(dir / "in", dir / "out", " --eval-fraction 1")), "eval_fraction");
}

}  // namespace
}  // namespace fsdpp
