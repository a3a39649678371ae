// The brief fuzz step's mutator (harness/testing/byte_mutator.h): libFuzzer dictionaries
// read as libFuzzer reads them, edits that are reproducible from a seed and bounded in size.
#include "harness/testing/byte_mutator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "harness/testing/temp_dir.h"

namespace fsdpp::harness {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::filesystem::path write_dictionary(const TempDir& dir, const std::string& text) {
  const auto path = dir / "words.dict";
  std::ofstream(path) << text;
  return path;
}

TEST(FuzzDictionary, ReadsQuotedWordsWithNamesEscapesAndCommentsAsLibFuzzerDoes) {
  TempDir dir("dict");
  const auto path = write_dictionary(dir, "# a comment\n\n\"plain\"\nkw1=\"\\\"quoted\\\"\"\n  \"\\x00\\xffA\\\\\"\n");
  EXPECT_THAT(read_fuzz_dictionary(path), ElementsAre("plain", "\"quoted\"",
                                                      std::string("\0\xff"
                                                                  "A\\",
                                                                  4)));
}

TEST(FuzzDictionary, AnUnquotedLineOrAnUnknownEscapeIsNamedWithItsFileAndLine) {
  TempDir dir("dict");
  const auto unquoted = write_dictionary(dir, "\"ok\"\nbare word\n");
  try {
    read_fuzz_dictionary(unquoted);
    FAIL() << "an unquoted word was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("words.dict:2: expected a quoted word"));
  }
  const auto escape = write_dictionary(dir, "\"\\n\"\n");
  try {
    read_fuzz_dictionary(escape);
    FAIL() << "an unknown escape was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("words.dict:1: unknown escape '\\n'"));
  }
}

TEST(ByteMutator, TheSameSeedGivesTheSameEditsAndEveryResultFitsTheBound) {
  const std::string seed_input = "{\"version\": 1, \"tokens\": [10, 20, 30]}";
  ByteMutator first(42, {"\"format\"", "null"}), second(42, {"\"format\"", "null"});
  std::set<std::string> distinct;
  for (int i = 0; i < 2000; ++i) {
    const std::string a = first.mutate(seed_input, "[1, 2]", 48);
    ASSERT_EQ(a, second.mutate(seed_input, "[1, 2]", 48)) << "run " << i;
    ASSERT_LE(a.size(), 48u);
    distinct.insert(a);
  }
  // Not a constant edit: nearly every run differs from the others.
  EXPECT_GT(distinct.size(), 1500u);
}

TEST(ByteMutator, DictionaryWordsAndEdgeNumbersReachTheInput) {
  ByteMutator mutator(7, {"WORD"});
  bool saw_word = false, saw_edge_number = false;
  for (int i = 0; i < 5000 && !(saw_word && saw_edge_number); ++i) {
    const std::string out = mutator.mutate("{\"n\": 12}", "", 4096);
    saw_word |= out.find("WORD") != std::string::npos;
    saw_edge_number |= out.find("18446744073709551616") != std::string::npos;
  }
  EXPECT_TRUE(saw_word);
  EXPECT_TRUE(saw_edge_number);
}

}  // namespace
}  // namespace fsdpp::harness
