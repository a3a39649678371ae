// prepare_data on a small tree of every input type with the real GPT-2 tokenizer: the
// documents come out in the documented order, each behind a separator, decoding back to
// their text; slices, the eval split and shard sizes follow prepare.h; the worker count
// changes nothing; and every bad input is an error naming it.
//
// The tokenizer is an asset from `bash ci/fetch_assets.sh` ($FSDPP_ASSETS_DIR, default
// <source>/.cache/assets); a missing asset fails the tests.
#include "core/data/prepare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "core/data/data_manifest.h"
#include "core/data/token_dataset.h"
#include "core/data/token_shard.h"
#include "core/tokenizer/load.h"
#include "harness/testing/assets.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::data {
namespace {

namespace fs = std::filesystem;
using harness::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int32_t kEot = 50256;  // GPT-2's <|endoftext|>

fs::path gpt2_dir() { return harness::test_asset("gpt2"); }

const tokenizer::BpeTokenizer& gpt2() {
  static const auto tok = tokenizer::load_tokenizer(gpt2_dir());
  return tok;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string read_file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// One file of each type, an ignored .csv and a subdirectory. The documents, in order:
const std::vector<std::string> kDocuments = {
    "Hello world.\nSecond line.",  // a.txt
    "First title",
    "Nested text",
    "tag one",  // b.json (numbers, booleans, null, "" skipped)
    "line one",
    "line two",  // c.jsonl
    "Yaml title",
    "plain words",
    "42",
    "doc two",             // d.yaml (plain 42 and true are not text)
    "In a subdirectory.",  // sub/f.txt
};

void write_tree(const fs::path& root) {
  write(root / "a.txt", kDocuments[0]);
  write(root / "b.json",
        R"({"title": "First title", "count": 3, "ok": true,
            "nested": {"text": "Nested text", "tags": ["tag one", 7, null]}, "empty": ""})");
  write(root / "c.jsonl", "{\"text\": \"line one\", \"id\": 1}\n\n{\"text\": \"line two\"}\n");
  write(root / "d.yaml",
        "title: Yaml title\nitems:\n  - plain words\n  - 42\n  - \"42\"\n  - true\n---\nsecond: doc two\n");
  write(root / "e.csv", "a,b\n1,2\n");
  write(root / "sub" / "f.txt", kDocuments[10]);
}

PrepareOptions options_for(const TempDir& dir) {
  PrepareOptions o;
  o.input = dir / "in";
  o.output_dir = dir / "out";
  o.tokenizer = gpt2_dir();
  o.workers = 2;
  return o;
}

std::vector<int32_t> all_tokens(const std::vector<fs::path>& shards) {
  auto d = TokenDataset::open_files(shards);
  auto t = d.tokens(0, d.num_tokens());
  return std::vector<int32_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

// The texts of the documents in `tokens`, each starting at a separator.
std::vector<std::string> decode_documents(const std::vector<int32_t>& tokens) {
  std::vector<std::string> docs;
  std::vector<int32_t> current;
  for (size_t i = 0; i <= tokens.size(); ++i) {
    if (i == tokens.size() || tokens[i] == kEot) {
      if (i > 0) docs.push_back(gpt2().decode(current));
      current.clear();
    } else {
      current.push_back(tokens[i]);
    }
  }
  return docs;
}

TEST(PrepareData, DocumentsAreTheFilesTextsInPathOrderEachBehindASeparator) {
  TempDir dir;
  write_tree(dir / "in");
  const auto r = prepare_data(options_for(dir));

  EXPECT_EQ(r.documents, 11);
  EXPECT_EQ(r.train_documents, 11);
  EXPECT_EQ(r.skipped_files, 1);
  EXPECT_TRUE(r.eval_shards.empty());
  const auto tokens = all_tokens(r.train_shards);
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(tokens[0], kEot);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), kEot), 11);
  EXPECT_THAT(decode_documents(tokens), ElementsAreArray(kDocuments));
  EXPECT_EQ(r.train_tokens, static_cast<int64_t>(tokens.size()));
}

TEST(PrepareData, StartAndEndSelectASliceOfTheDocuments) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.start_idx = 2;
  o.end_idx = 5;
  const auto r = prepare_data(o);
  EXPECT_EQ(r.documents, 3);
  EXPECT_THAT(decode_documents(all_tokens(r.train_shards)), ElementsAre(kDocuments[2], kDocuments[3], kDocuments[4]));
}

TEST(PrepareData, EvalSplitTakesFloorOfNTimesFractionEvenlySpreadDocuments) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.eval_fraction = 0.3;  // i -> eval iff floor((i+1)*0.3) > floor(i*0.3): i = 3, 6, 9
  const auto r = prepare_data(o);

  EXPECT_EQ(r.eval_documents, static_cast<int64_t>(std::floor(11 * 0.3)));
  EXPECT_THAT(decode_documents(all_tokens(r.eval_shards)), ElementsAre(kDocuments[3], kDocuments[6], kDocuments[9]));
  std::vector<std::string> train;
  for (size_t i = 0; i < kDocuments.size(); ++i)
    if (i != 3 && i != 6 && i != 9) train.push_back(kDocuments[i]);
  EXPECT_THAT(decode_documents(all_tokens(r.train_shards)), ElementsAreArray(train));
  EXPECT_EQ(r.train_documents + r.eval_documents, 11);
}

TEST(PrepareData, ShardsHoldShardTokensEachExceptTheLast) {
  TempDir dir;
  write_tree(dir / "in");
  const auto whole = all_tokens(prepare_data(options_for(dir)).train_shards);
  auto o = options_for(dir);
  o.shard_tokens = 10;
  o.output_dir = dir / "small";
  const auto r = prepare_data(o);

  ASSERT_EQ(r.train_shards.size(), (whole.size() + 9) / 10);
  int64_t documents = 0;
  for (size_t i = 0; i < r.train_shards.size(); ++i) {
    const auto header = read_shard_header(r.train_shards[i]);
    EXPECT_EQ(header.dtype, TokenDtype::kUint16);
    if (i + 1 < r.train_shards.size()) {
      EXPECT_EQ(header.token_count, 10);
    }
    documents += header.document_count;
  }
  EXPECT_EQ(documents, 11);
  EXPECT_EQ(r.train_shards[0].filename(), "train_000000.tok");
  EXPECT_EQ(all_tokens(r.train_shards), whole);
}

TEST(PrepareData, OneWorkerAndFourWorkersWriteIdenticalFiles) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.eval_fraction = 0.2;
  o.shard_tokens = 16;
  o.workers = 1;
  o.output_dir = dir / "one";
  const auto one = prepare_data(o);
  o.workers = 4;
  o.output_dir = dir / "four";
  const auto four = prepare_data(o);

  ASSERT_EQ(one.train_shards.size(), four.train_shards.size());
  ASSERT_EQ(one.eval_shards.size(), four.eval_shards.size());
  ASSERT_GT(one.train_shards.size(), 1u);  // several shards: each one compared
  std::vector<std::string> names_one, names_four;
  for (const auto& e : fs::directory_iterator(dir / "one")) names_one.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(dir / "four")) names_four.push_back(e.path().filename().string());
  std::sort(names_one.begin(), names_one.end());
  std::sort(names_four.begin(), names_four.end());
  ASSERT_EQ(names_one, names_four);
  for (const auto& name : names_one)
    EXPECT_EQ(read_file_bytes(dir / "one" / name), read_file_bytes(dir / "four" / name)) << name;
  EXPECT_EQ(all_tokens(one.train_shards), all_tokens(four.train_shards));
  EXPECT_EQ(all_tokens(one.eval_shards), all_tokens(four.eval_shards));
}

TEST(PrepareData, JsonKeysSelectOnlyTheStringsBelowThoseKeys) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.json_keys = {"text"};
  const auto r = prepare_data(o);
  // .txt files are whole documents whatever the keys.
  EXPECT_THAT(decode_documents(all_tokens(r.train_shards)),
              ElementsAre(kDocuments[0], "Nested text", "line one", "line two", kDocuments[10]));
}

TEST(PrepareData, ManifestDescribesTheShardsAndReadsBack) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.eval_fraction = 0.3;
  o.shard_tokens = 20;
  const auto r = prepare_data(o);
  const auto m = read_data_manifest(dir / "out");

  EXPECT_EQ(m.dtype, "uint16");
  EXPECT_EQ(m.documents_in_input, 11);
  EXPECT_EQ(m.train_documents, r.train_documents);
  EXPECT_EQ(m.eval_tokens, r.eval_tokens);
  ASSERT_EQ(m.train_shards.size(), r.train_shards.size());
  int64_t tokens = 0;
  for (const auto& s : m.train_shards) tokens += read_shard_header(dir / "out" / s.file).token_count;
  EXPECT_EQ(tokens, m.train_tokens);
  EXPECT_EQ(m.tokenizer["document_separator"]["id"], kEot);
  EXPECT_EQ(m.source["skipped_files"], 1);

  auto j = m.to_json();
  j["version"] = 2;
  EXPECT_THAT(
      [&] { DataManifest::from_json(j, "m.json"); },
      ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("m.json: manifest version 2 is not supported")));
}

TEST(PrepareData, ARerunRemovesShardsItNoLongerWrites) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.shard_tokens = 5;
  ASSERT_GT(prepare_data(o).train_shards.size(), 2u);
  o.shard_tokens = 1000;
  prepare_data(o);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "out")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names, ElementsAre("manifest.json", "train_000000.tok"));
}

TEST(PrepareData, OutputInsideTheInputIsNotRead) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.output_dir = dir / "in" / "out";
  prepare_data(o);
  EXPECT_EQ(prepare_data(o).documents, 11);  // the first run's manifest.json is not input
}

template <class E>
void expect_error(const PrepareOptions& o, const std::vector<std::string>& parts) {
  try {
    prepare_data(o);
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

TEST(PrepareData, InvalidJsonIsAnErrorNamingTheFile) {
  TempDir dir;
  write_tree(dir / "in");
  write(dir / "in" / "bad.json", "{ \"text\": nope }");
  expect_error<std::invalid_argument>(options_for(dir), {(dir / "in" / "bad.json").string(), "invalid JSON", "line 1"});
}

TEST(PrepareData, InvalidJsonlLineIsAnErrorNamingTheFileAndLine) {
  TempDir dir;
  write(dir / "in" / "c.jsonl", "{\"text\": \"ok\"}\n{\"text\": \n");
  expect_error<std::invalid_argument>(options_for(dir), {(dir / "in" / "c.jsonl").string() + ":2", "invalid JSON"});
}

TEST(PrepareData, InvalidYamlIsAnErrorNamingTheFileAndLine) {
  TempDir dir;
  write(dir / "in" / "d.yaml", "a: ok\nb: [1, 2\nc: 3\n");
  expect_error<std::invalid_argument>(options_for(dir), {(dir / "in" / "d.yaml").string() + ":", "invalid YAML"});
}

TEST(PrepareData, EndBeyondTheDocumentsIsAnError) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.end_idx = 12;
  expect_error<std::invalid_argument>(o, {"end_idx 12 is beyond the 11 documents"});
}

TEST(PrepareData, StartAtTheEndSelectsNothingAndIsAnError) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.start_idx = 11;
  expect_error<std::invalid_argument>(o, {"start_idx 11 selects no documents"});
}

TEST(PrepareData, InputWithoutDocumentsIsAnError) {
  TempDir dir;
  write(dir / "in" / "empty.txt", "");
  write(dir / "in" / "e.csv", "a,b\n");
  write(dir / "in" / "n.json", "[1, 2, null]");
  expect_error<std::runtime_error>(options_for(dir), {(dir / "in").string(), "no documents"});
}

TEST(PrepareData, OptionsOutsideTheirRangesAreRejectedByName) {
  TempDir dir;
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.eval_fraction = 1.0;
  expect_error<std::invalid_argument>(o, {"eval_fraction", "[0, 1)"});
  o = options_for(dir);
  o.shard_tokens = 0;
  expect_error<std::invalid_argument>(o, {"shard_tokens"});
  o = options_for(dir);
  o.start_idx = 3;
  o.end_idx = 3;
  expect_error<std::invalid_argument>(o, {"end_idx 3", "start_idx 3"});
}

TEST(PrepareData, MissingInputOrTokenizerIsAnErrorNamingThePath) {
  TempDir dir;
  expect_error<std::runtime_error>(options_for(dir), {(dir / "in").string(), "no such file or directory"});
  write_tree(dir / "in");
  auto o = options_for(dir);
  o.tokenizer = dir / "no-tokenizer";
  expect_error<std::runtime_error>(o, {(dir / "no-tokenizer").string(), "no tokenizer"});
}

}  // namespace
}  // namespace fsdpp::data
