// The BPE tokenizers agree exactly with llama.cpp's reference vectors
// (models/ggml-vocab-{gpt-2,llama-spm}.gguf.{inp,out}, produced by llama.cpp's
// tests/test-tokenizer-0 with add_special = false), decode inverts encode, and malformed
// tokenizer files are rejected with a message naming the file and the expectation.
//
// Assets come from `bash ci/fetch_assets.sh` into $FSDPP_ASSETS_DIR (default
// <source>/.cache/assets). Missing assets FAIL the tests: they are never skipped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/file_tree.h"
#include "core/tokenizer/bpe_tokenizer.h"
#include "harness/testing/assets.h"

namespace fsdpp {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using tokenizer::BpeTokenizer;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's vector format, read as its tests/test-tokenizer-0.cpp reads it: the .inp file
// is the inputs, each followed by "\n__ggml_vocab_test__\n" (so an input ends right before
// the separator's newline, and the empty input is a separator right after another); the
// .out file has one line per input, its ids separated by spaces (surrounding spaces ignored).
std::vector<VocabCase> read_vocab_cases(const std::string& name) {
  const std::string inp = read_all(harness::test_asset("llama.cpp/" + name + ".inp"));
  const std::string out = read_all(harness::test_asset("llama.cpp/" + name + ".out"));

  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::vector<int32_t>> id_lists;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<int32_t> ids;
    for (int32_t id; fields >> id;) ids.push_back(id);
    if (!fields.eof()) throw std::runtime_error(name + ".out: non-integer in line '" + line + "'");
    id_lists.push_back(ids);
  }
  if (texts.size() != id_lists.size() || texts.empty()) {
    throw std::runtime_error(name + ": " + std::to_string(texts.size()) + " inputs but " +
                             std::to_string(id_lists.size()) + " output lines");
  }
  std::vector<VocabCase> cases;
  for (size_t i = 0; i < texts.size(); ++i) cases.push_back({texts[i], id_lists[i]});
  return cases;
}

const BpeTokenizer& gpt2() {
  static const BpeTokenizer tok =
      BpeTokenizer::from_gpt2_files(harness::test_asset("gpt2/encoder.json"), harness::test_asset("gpt2/vocab.bpe"));
  return tok;
}

// Llama-2's vocabulary as llama.cpp generated the vectors from it (GGUF, scores).
const BpeTokenizer& llama2() {
  static const BpeTokenizer tok =
      BpeTokenizer::from_gguf_vocab(harness::test_asset("llama.cpp/ggml-vocab-llama-spm.gguf"));
  return tok;
}

// The Hugging Face tokenizer.json that transformers builds from the same Llama-2 GGUF
// vocabulary (ci/assets_from_gguf.py): BPE with byte_fallback behind a Metaspace
// pre-tokenizer (prepend_scheme "first"), the shape transformers 5 writes.
const BpeTokenizer& hf_sentencepiece() {
  static const BpeTokenizer tok =
      BpeTokenizer::from_hf_tokenizer_json(harness::test_asset("hf-llama-spm/tokenizer.json"));
  return tok;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return "[" + s + "]";
}

// Encodes every case; one failure per mismatching case, and the tally on stdout.
void expect_all_cases_encode_exactly(const BpeTokenizer& tok, const std::string& name) {
  const std::vector<VocabCase> cases = read_vocab_cases(name);
  size_t exact = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(cases[i].text);
    if (got == cases[i].ids) {
      ++exact;
    } else {
      ADD_FAILURE() << name << " case " << i << " '" << cases[i].text << "'\n  expected " << ids_str(cases[i].ids)
                    << "\n  got      " << ids_str(got);
    }
  }
  std::cout << name << ": " << exact << "/" << cases.size() << " vectors encode exactly\n";
}

void expect_decode_inverts_encode(const BpeTokenizer& tok, const std::string& name) {
  for (const VocabCase& c : read_vocab_cases(name)) {
    EXPECT_EQ(tok.decode(tok.encode(c.text)), c.text) << name;
    // The reference ids themselves decode to the input too.
    EXPECT_EQ(tok.decode(c.ids), c.text) << name;
  }
}

TEST(Gpt2Tokenizer, EncodesEveryLlamaCppVectorExactly) {
  expect_all_cases_encode_exactly(gpt2(), "ggml-vocab-gpt-2.gguf");
}

TEST(Gpt2Tokenizer, DecodeInvertsEncodeOnEveryVector) { expect_decode_inverts_encode(gpt2(), "ggml-vocab-gpt-2.gguf"); }

TEST(Gpt2Tokenizer, IsByteLevelWithGpt2sVocabulary) {
  EXPECT_EQ(gpt2().kind(), BpeTokenizer::Kind::kByteLevel);
  EXPECT_EQ(gpt2().vocab_size(), 50257u);
}

// Byte-level BPE is lossless on any bytes, valid UTF-8 or not.
RC_GTEST_PROP(Gpt2Tokenizer, DecodeInvertsEncodeOnArbitraryBytes, (const std::string& text)) {
  RC_ASSERT(gpt2().decode(gpt2().encode(text)) == text);
}

TEST(Llama2Tokenizer, EncodesEveryLlamaCppVectorExactly) {
  expect_all_cases_encode_exactly(llama2(), "ggml-vocab-llama-spm.gguf");
}

TEST(Llama2Tokenizer, DecodeInvertsEncodeOnEveryVector) {
  expect_decode_inverts_encode(llama2(), "ggml-vocab-llama-spm.gguf");
}

TEST(Llama2Tokenizer, IsSentencePieceStyleWithLlama2sVocabulary) {
  EXPECT_EQ(llama2().kind(), BpeTokenizer::Kind::kSentencePiece);
  EXPECT_EQ(llama2().vocab_size(), 32000u);
}

// With byte_fallback every byte string round-trips, except that a "▁" (U+2581) in the
// text decodes as a space: the normalizer maps both to the same token text.
RC_GTEST_PROP(Llama2Tokenizer, DecodeInvertsEncodeOnArbitraryBytesWithoutU2581, (const std::string& text)) {
  RC_PRE(text.find("\u2581") == std::string::npos);
  RC_ASSERT(llama2().decode(llama2().encode(text)) == text);
}

// Metaspace adds its "▁" only where the text does not already start with one, where
// SentencePiece always adds it; so on a text with a leading space the two differ by
// design (HF drops that space on decode), and everywhere else they agree.
TEST(HfSentencePieceTokenizer, EncodesEveryLlamaCppVectorWithoutALeadingSpaceExactly) {
  EXPECT_EQ(hf_sentencepiece().kind(), BpeTokenizer::Kind::kSentencePiece);
  size_t compared = 0;
  for (const VocabCase& c : read_vocab_cases("ggml-vocab-llama-spm.gguf")) {
    if (!c.text.empty() && c.text.front() == ' ') continue;
    EXPECT_EQ(ids_str(hf_sentencepiece().encode(c.text)), ids_str(c.ids)) << "'" << c.text << "'";
    ++compared;
  }
  EXPECT_GT(compared, 20u);
}

TEST(HfSentencePieceTokenizer, DecodeInvertsEncodeOnEveryVectorInputWithoutALeadingSpace) {
  for (const VocabCase& c : read_vocab_cases("ggml-vocab-llama-spm.gguf")) {
    if (!c.text.empty() && c.text.front() == ' ') continue;
    EXPECT_EQ(hf_sentencepiece().decode(hf_sentencepiece().encode(c.text)), c.text);
  }
}

TEST(HfSentencePieceTokenizer, MetaspaceAddsNoSecondPrefixToALeadingSpace) {
  // " Hello": SentencePiece gives "▁▁Hello" (29871 15043), Metaspace "▁Hello" (15043).
  EXPECT_EQ(ids_str(llama2().encode(" Hello")), "[29871 15043]");
  EXPECT_EQ(ids_str(hf_sentencepiece().encode(" Hello")), "[15043]");
  EXPECT_EQ(hf_sentencepiece().decode(hf_sentencepiece().encode(" Hello")), "Hello");
}

// ---------------------------------------------------------------------------------------
// Malformed input

class TokenizerFileErrors : public ::testing::Test {
 protected:
  fs::path write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("fsdpp_tokenizer_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { io::remove_tree(dir_); }
  fs::path dir_;
};

TEST_F(TokenizerFileErrors, MissingTokenizerJsonIsARuntimeErrorNamingTheFile) {
  const fs::path missing = dir_ / "no_such_tokenizer.json";
  try {
    BpeTokenizer::from_hf_tokenizer_json(missing);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(missing.string()), HasSubstr("cannot open"), HasSubstr("tokenizer.json")));
  }
}

TEST_F(TokenizerFileErrors, MissingGpt2MergesFileIsARuntimeErrorNamingTheFile) {
  const fs::path vocab = write("vocab.json", "{}");
  const fs::path missing = dir_ / "merges.txt";
  try {
    BpeTokenizer::from_gpt2_files(vocab, missing);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(missing.string()), HasSubstr("merges.txt")));
  }
}

TEST_F(TokenizerFileErrors, InvalidJsonIsAnInvalidArgumentNamingTheFile) {
  const fs::path bad = write("tokenizer.json", "{\"model\": {\"type\": \"BPE\",");
  try {
    BpeTokenizer::from_hf_tokenizer_json(bad);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(bad.string()), HasSubstr("not valid JSON"), HasSubstr("tokenizer.json")));
  }
}

TEST_F(TokenizerFileErrors, UnknownModelTypeIsAnInvalidArgumentNamingTypeAndExpectation) {
  const fs::path wordpiece = write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  try {
    BpeTokenizer::from_hf_tokenizer_json(wordpiece);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr(wordpiece.string()), HasSubstr("\"WordPiece\""), HasSubstr("expected \"BPE\"")));
  }
}

TEST_F(TokenizerFileErrors, UnknownMetaspacePrependSchemeIsAnInvalidArgumentNamingTheSchemeAndExpectation) {
  const fs::path file = write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "sometimes"}})");
  try {
    BpeTokenizer::from_hf_tokenizer_json(file);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr(file.string()), HasSubstr("\"sometimes\""), HasSubstr("expected \"always\"")));
  }
}

TEST_F(TokenizerFileErrors, MergeOfUnknownTokensIsAnInvalidArgumentNamingTheLine) {
  const fs::path vocab = write("vocab.json", R"({"a": 0, "b": 1})");
  const fs::path merges = write("merges.txt", "#version: 0.2\na b\n");
  try {
    BpeTokenizer::from_gpt2_files(vocab, merges);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(merges.string() + "' line 2"), HasSubstr("not in the vocabulary")));
  }
}

TEST_F(TokenizerFileErrors, NonGgufVocabularyIsAnInvalidArgumentNamingTheFile) {
  const fs::path not_gguf = write("vocab.gguf", "GGML not a gguf file");
  try {
    BpeTokenizer::from_gguf_vocab(not_gguf);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(not_gguf.string()), HasSubstr("GGUF")));
  }
}

TEST(TokenizerDecode, IdOutsideTheVocabularyIsOutOfRange) {
  EXPECT_THROW(gpt2().decode({50257}), std::out_of_range);
  EXPECT_THROW(llama2().decode({-1}), std::out_of_range);
}

}  // namespace
}  // namespace fsdpp
