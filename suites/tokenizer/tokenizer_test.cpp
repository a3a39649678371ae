// The BPE tokenizers agree exactly with llama.cpp's reference vectors
// (models/ggml-vocab-{gpt-2,llama-spm,llama-bpe,qwen2,phi-3}.gguf.{inp,out}, produced by
// llama.cpp's tests/test-tokenizer-0 with add_special = false), read from the GGUF and from
// the tokenizer.json transformers makes of it; decode inverts encode; the Llama 3 / Qwen2
// pre-tokenizer and NFC agree with Hugging Face tokenizers on hand-picked corners; and
// malformed or unsupported tokenizer files are rejected with a message naming the file and
// the field.
//
// Assets come from `bash ci/fetch_assets.sh` into $FSDPP_ASSETS_DIR (default
// <source>/.cache/assets). Missing assets FAIL the tests: they are never skipped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/io/file_tree.h"
#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/llama3_pretokenizer.h"
#include "core/tokenizer/load.h"
#include "core/tokenizer/nfc.h"
#include "core/tokenizer/unicode.h"
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
// Llama 3, Qwen2, Phi-3

const BpeTokenizer& gguf(const std::string& vocab) {
  static std::map<std::string, BpeTokenizer> loaded;
  auto it = loaded.find(vocab);
  if (it == loaded.end())
    it = loaded
             .emplace(vocab,
                      BpeTokenizer::from_gguf_vocab(harness::test_asset("llama.cpp/ggml-vocab-" + vocab + ".gguf")))
             .first;
  return it->second;
}

// hf-VOCAB: transformers' conversion of ggml-vocab-VOCAB.gguf; hf-VOCAB-hub: the same in
// the shape of the family's Hub file (ci/assets_from_gguf.py hub).
const BpeTokenizer& hf(const std::string& folder) {
  static std::map<std::string, BpeTokenizer> loaded;
  auto it = loaded.find(folder);
  if (it == loaded.end())
    it = loaded.emplace(folder, BpeTokenizer::from_hf_tokenizer_json(harness::test_asset(folder + "/tokenizer.json")))
             .first;
  return it->second;
}

TEST(Llama3Tokenizer, EncodesEveryLlamaCppVectorExactlyFromTheGguf) {
  EXPECT_EQ(gguf("llama-bpe").kind(), BpeTokenizer::Kind::kByteLevel);
  EXPECT_EQ(gguf("llama-bpe").vocab_size(), 128256u);
  expect_all_cases_encode_exactly(gguf("llama-bpe"), "ggml-vocab-llama-bpe.gguf");
}

TEST(Llama3Tokenizer, DecodeInvertsEncodeOnEveryVector) {
  expect_decode_inverts_encode(gguf("llama-bpe"), "ggml-vocab-llama-bpe.gguf");
}

// The Hub's Llama 3 tokenizer.json sets ignore_merges, as llama.cpp's llama-bpe does.
TEST(Llama3Tokenizer, EncodesEveryLlamaCppVectorExactlyFromAHubShapedTokenizerJson) {
  expect_all_cases_encode_exactly(hf("hf-llama-bpe-hub"), "ggml-vocab-llama-bpe.gguf");
}

// transformers' GGUF conversion writes ignore_merges false, so a piece that is itself a
// token is merged instead when its merges lead elsewhere: "Việt" is token 101798 for
// llama.cpp (and with the Hub's file) but 11655 26298 83 with the converted file, in
// fsdpp as in Hugging Face tokenizers (checked there). Every other vector agrees.
TEST(Llama3Tokenizer, TransformersConvertedTokenizerJsonDiffersFromLlamaCppOnlyWhereIgnoreMergesMatters) {
  size_t exact = 0;
  std::vector<std::string> differing;
  for (const VocabCase& c : read_vocab_cases("ggml-vocab-llama-bpe.gguf")) {
    const std::vector<int32_t> got = hf("hf-llama-bpe").encode(c.text);
    if (got == c.ids)
      ++exact;
    else
      differing.push_back(c.text + " " + ids_str(got));
  }
  EXPECT_THAT(differing, ::testing::ElementsAre("C\u1eeda Vi\u1ec7t [34 91163 11655 26298 83]"));
  EXPECT_EQ(exact, 45u);
}

TEST(Qwen2Tokenizer, EncodesEveryLlamaCppVectorExactlyFromTheGguf) {
  EXPECT_EQ(gguf("qwen2").kind(), BpeTokenizer::Kind::kByteLevel);
  expect_all_cases_encode_exactly(gguf("qwen2"), "ggml-vocab-qwen2.gguf");
}

TEST(Qwen2Tokenizer, DecodeInvertsEncodeOnEveryVector) {
  expect_decode_inverts_encode(gguf("qwen2"), "ggml-vocab-qwen2.gguf");
}

TEST(Qwen2Tokenizer, EncodesEveryLlamaCppVectorExactlyFromTheTransformersConvertedTokenizerJson) {
  expect_all_cases_encode_exactly(hf("hf-qwen2"), "ggml-vocab-qwen2.gguf");
}

// The Hub's Qwen2.5 file adds an NFC normalizer; the vectors are all NFC already.
TEST(Qwen2Tokenizer, EncodesEveryLlamaCppVectorExactlyFromAHubShapedTokenizerJsonWithNfc) {
  expect_all_cases_encode_exactly(hf("hf-qwen2-hub"), "ggml-vocab-qwen2.gguf");
}

// Ids from Hugging Face tokenizers 0.23 with the same files: "e" + U+0301 is "é" after NFC.
TEST(Qwen2Tokenizer, NfcNormalizerComposesBeforeSplittingAndOnlyWhenTheFileSaysSo) {
  EXPECT_EQ(ids_str(hf("hf-qwen2-hub").encode("e\u0301")), "[963]");
  EXPECT_EQ(ids_str(hf("hf-qwen2-hub").encode("\u00e9")), "[963]");
  EXPECT_EQ(ids_str(hf("hf-qwen2").encode("e\u0301")), "[68 53839]");
  EXPECT_EQ(hf("hf-qwen2-hub").decode(hf("hf-qwen2-hub").encode("e\u0301 x")), "\u00e9 x");
}

// Hugging Face tokenizers 0.23's ids for the regex corners (tests/hand vectors of
// suites/references/hf_judge_tokenizers.sh compare more of them on every run).
TEST(Llama3Tokenizer, RegexCornersEncodeAsHuggingFaceDoes) {
  const BpeTokenizer& llama3 = gguf("llama-bpe");
  const BpeTokenizer& qwen2 = gguf("qwen2");
  EXPECT_EQ(ids_str(llama3.encode("1234567")), "[4513 10961 22]");
  EXPECT_EQ(ids_str(qwen2.encode("1234567")), "[16 17 18 19 20 21 22]");
  EXPECT_EQ(ids_str(llama3.encode("\r\n\n  x")), "[81923 220 865]");
  EXPECT_EQ(ids_str(qwen2.encode("\r\n\n  x")), "[80823 220 856]");
  EXPECT_EQ(ids_str(llama3.encode("'S")), "[13575]");
  EXPECT_EQ(ids_str(llama3.encode("\ud55c\uad6d\uc5b4")), "[112699 32179]");
  EXPECT_EQ(ids_str(llama3.encode("\U0001F600")), "[76460 222]");
}

std::vector<std::string> pieces(std::string_view text, size_t max_digit_run) {
  std::vector<std::string> out;
  for (std::string_view p : tokenizer::split_llama3_pieces(text, max_digit_run)) out.emplace_back(p);
  return out;
}

// The pieces of Hugging Face's Split with Llama 3's pattern (Oniguruma), for the corners of
// the pattern: digit runs, newlines after other whitespace, case-insensitive contractions
// (U+017F LONG S folds to "s"), a letter led by punctuation or a no-break space.
TEST(Llama3PreTokenizer, SplitsTheRegexCornersAsHuggingFaceDoes) {
  using ::testing::ElementsAre;
  EXPECT_THAT(pieces("1234567 12", 3), ElementsAre("123", "456", "7", " ", "12"));
  EXPECT_THAT(pieces("1234567 12", 1), ElementsAre("1", "2", "3", "4", "5", "6", "7", " ", "1", "2"));
  EXPECT_THAT(pieces("\r\n\n  x", 3), ElementsAre("\r\n\n", " ", " x"));
  EXPECT_THAT(pieces("  \n  \t x", 3), ElementsAre("  \n", "  \t", " x"));
  EXPECT_THAT(pieces("'S 'Re 'LL", 3), ElementsAre("'S", " '", "Re", " '", "LL"));
  EXPECT_THAT(pieces("a'\u017Fb a'veb", 3), ElementsAre("a", "'\u017F", "b", " a", "'ve", "b"));
  EXPECT_THAT(pieces("!hello ?!\n\nx", 3), ElementsAre("!hello", " ?!\n\n", "x"));
  EXPECT_THAT(pieces("x\u00a0\u00a0y", 3), ElementsAre("x", "\u00a0", "\u00a0y"));
}

// An invalid UTF-8 byte splits as U+FFFD would, and byte-level BPE keeps every byte.
std::string with_replacement_chars(const std::string& bytes) {
  std::string out;
  for (size_t pos = 0; pos < bytes.size();) {
    const tokenizer::unicode::CodePoint cp = tokenizer::unicode::decode_utf8(bytes, pos);
    tokenizer::unicode::append_utf8(cp.value, out);
    pos += cp.byte_len;
  }
  return out;
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) pos += tokenizer::unicode::decode_utf8(s, pos).byte_len;
  return n;
}

RC_GTEST_PROP(Llama3PreTokenizer, SplitsEachInvalidUtf8ByteAsIfItWereUFFFD, (const std::string& bytes)) {
  for (size_t digits : {1, 3}) {
    std::vector<size_t> raw, replaced;
    for (std::string_view p : tokenizer::split_llama3_pieces(bytes, digits)) raw.push_back(code_points(p));
    const std::string text = with_replacement_chars(bytes);
    for (std::string_view p : tokenizer::split_llama3_pieces(text, digits)) replaced.push_back(code_points(p));
    RC_ASSERT(raw == replaced);
  }
}

RC_GTEST_PROP(Llama3Tokenizer, DecodeInvertsEncodeOnArbitraryBytes, (const std::string& text)) {
  RC_ASSERT(gguf("llama-bpe").decode(gguf("llama-bpe").encode(text)) == text);
  RC_ASSERT(gguf("qwen2").decode(gguf("qwen2").encode(text)) == text);
  RC_ASSERT(hf("hf-qwen2-hub").decode(hf("hf-qwen2-hub").encode(text)) == tokenizer::unicode::nfc(text));
}

// data prepare starts every document with <|endoftext|>, else <s>, else Llama 3's BOS,
// else Gemma's <bos>.
TEST(DocumentSeparator, IsEndOfTextForQwen2AndPhi3SForLlama2BeginOfTextForLlama3AndBosForGemma) {
  EXPECT_EQ(tokenizer::document_separator_id(gguf("qwen2")), 151643);
  EXPECT_EQ(tokenizer::document_separator_id(gguf("phi-3")), 32000);
  EXPECT_EQ(tokenizer::document_separator_id(llama2()), 1);
  EXPECT_EQ(tokenizer::document_separator_id(gguf("llama-bpe")), 128000);
  EXPECT_EQ(tokenizer::document_separator_id(hf("hf-llama-bpe-hub")), 128000);
  EXPECT_EQ(tokenizer::document_separator_id(hf("hf-gemma-kjv")), 2);
}

// Phi-3 (mini) uses Llama-2's SentencePiece-style BPE with its own 32064-token vocabulary.
TEST(Phi3Tokenizer, EncodesEveryLlamaCppVectorExactlyFromTheGgufAndTheTransformersConvertedTokenizerJson) {
  EXPECT_EQ(gguf("phi-3").kind(), BpeTokenizer::Kind::kSentencePiece);
  expect_all_cases_encode_exactly(gguf("phi-3"), "ggml-vocab-phi-3.gguf");
  expect_all_cases_encode_exactly(hf("hf-phi-3"), "ggml-vocab-phi-3.gguf");
}

TEST(Phi3Tokenizer, DecodeInvertsEncodeOnEveryVector) {
  expect_decode_inverts_encode(gguf("phi-3"), "ggml-vocab-phi-3.gguf");
}

// A tokenizer.json's non-special added tokens are found in the text before the normalizer,
// as HF's AddedVocabulary finds them, and each section between them is normalized on its
// own: Phi-3's converted file has "</s>" non-special and a Prepend normalizer, so every
// section gets its "▁". Expected ids: HF tokenizers 0.23.3 on the same files
// (encode_special_tokens, add_special_tokens=False), as harness/references/hf_tokenize.py.
TEST(AddedTokens, NonSpecialOnesSplitTheTextAndEachSectionIsNormalizedAsHuggingFaceDoes) {
  EXPECT_EQ(ids_str(hf("hf-phi-3").encode("a</s>b")), "[263 2 289]");
  EXPECT_EQ(ids_str(hf("hf-phi-3").encode("</s>Hello world")), "[2 15043 3186]");
  EXPECT_EQ(ids_str(hf("hf-phi-3").encode("Hi </s> there")), "[6324 29871 2 29871 727]");
  EXPECT_EQ(ids_str(hf("hf-qwen2-hub").encode("x[PAD151646]y")), "[87 151646 88]");
  // Special tokens stay plain text, in the GGUF and the tokenizer.json alike.
  EXPECT_EQ(hf("hf-phi-3").encode("a<s>b"), gguf("phi-3").encode("a<s>b"));
}

// Gemma's pipeline (hf-gemma-kjv, ci/gemma_tokenizer.py: a SentencePiece BPE trained with
// Gemma's settings, as transformers' GemmaTokenizer converts it): normalizer Replace " " ->
// "▁" and no prefix, a Split " " pre-tokenizer, byte fallback, user-defined pieces
// (<start_of_turn>, newline runs, "▁" runs, HTML tags) as non-special added tokens.
// Expected ids: HF tokenizers 0.23.3 on the same file (pinned by the .model's sha256).
TEST(GemmaTokenizer, EncodesUserDefinedPiecesByteFallbackAndDigitsAsHuggingFaceDoes) {
  const BpeTokenizer& tok = hf("hf-gemma-kjv");
  EXPECT_EQ(tok.kind(), BpeTokenizer::Kind::kSentencePiece);
  EXPECT_EQ(ids_str(tok.encode("<start_of_turn>user\nIn the beginning<end_of_turn>\n")),
            "[15 520 354 17 1210 346 2652 16 17]");
  EXPECT_EQ(ids_str(tok.encode("And God said,\n\n\nLet there be light")), "[384 490 478 3957 19 1433 465 385 1248]");
  // <bos> and <eos> are special (control pieces): plain text, "<" and ">" by byte fallback.
  EXPECT_EQ(ids_str(tok.encode("<bos>In<eos>")), "[148 3962 558 150 1210 148 3943 558 150]");
  // "  " becomes "▁▁" by the normalizer and merges; a literal "▁▁" is the added token.
  EXPECT_EQ(ids_str(tok.encode("two  spaces and \u2581\u2581 literal")),
            "[3944 3958 3947 48 3949 3963 1240 355 3942 48 389 380 354 522]");
  EXPECT_EQ(ids_str(tok.encode("\tcaf\u00e9 1234 \U0001F917")),
            "[97 3960 3946 3954 283 257 3942 3996 3998 139 140 3942 328 247 252 239]");
  EXPECT_EQ(ids_str(tok.encode("<b>Amen</b>")), "[86 3967 1614 87]");
  EXPECT_EQ(tok.decode(tok.encode("<start_of_turn>user\nIn the  beginning \U0001F917")),
            "<start_of_turn>user\nIn the  beginning \U0001F917");
}

// Falcon: punctuation runs, GPT-2's regex, numeric runs, ASCII digit triples, as the
// Hugging Face Sequence of Falcon's Hub file splits (ci/assets_from_gguf.py hub falcon).
TEST(FalconTokenizer, EncodesEveryLlamaCppVectorExactlyFromTheGgufAndAHubShapedTokenizerJson) {
  EXPECT_EQ(gguf("falcon").kind(), BpeTokenizer::Kind::kByteLevel);
  expect_all_cases_encode_exactly(gguf("falcon"), "ggml-vocab-falcon.gguf");
  expect_all_cases_encode_exactly(hf("hf-falcon-hub"), "ggml-vocab-falcon.gguf");
}

TEST(FalconTokenizer, DecodeInvertsEncodeOnEveryVector) {
  expect_decode_inverts_encode(gguf("falcon"), "ggml-vocab-falcon.gguf");
}

// Ids from Hugging Face tokenizers 0.23 with hf-falcon-hub: Digits runs on the characters
// bytes_to_unicode gives, so the byte 0xBD of "½" (C2 BD) is numeric and split off; a
// space before digits is its own piece; U+166D is punctuation in tokenizers' old tables.
TEST(FalconTokenizer, NumericBytesDigitTriplesAndPunctuationSplitAsHuggingFaceDoes) {
  for (const BpeTokenizer* tok : {&gguf("falcon"), &hf("hf-falcon-hub")}) {
    EXPECT_EQ(ids_str(tok->encode("\u00bd")), "[136 133]");
    EXPECT_EQ(ids_str(tok->encode(" 1234567")), "[204 10963 27681 34]");
    EXPECT_EQ(ids_str(tok->encode("a\u166db")), "[76 167 231 239 77]");
  }
}

// Falcon's vocabulary lacks the symbols of 28 bytes (control bytes, bytes UTF-8 never
// uses). Hugging Face tokenizers drops such a byte from the ids; fsdpp refuses the text.
TEST(FalconTokenizer, ByteWithoutASymbolInTheVocabularyIsRefusedNotDropped) {
  try {
    gguf("falcon").encode(std::string{'a', '\x03', 'b'});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("byte 3"), HasSubstr("not in the vocabulary")));
  }
}

// NFC, against Python's unicodedata (Unicode 14.0): composition, reordering by combining
// class, blocked composition, Hangul, and invalid bytes kept as they are.
TEST(Nfc, ComposesReordersAndKeepsInvalidBytes) {
  using tokenizer::unicode::nfc;
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("a\u0302\u0323"), "\u1ead");        // reordered to a + dot below + circumflex
  EXPECT_EQ(nfc("a\u0301\u0301"), "\u00e1\u0301");  // the second acute is blocked
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");   // Hangul L V T
  EXPECT_EQ(nfc("\u212b"), "\u00c5");               // ANGSTROM SIGN (singleton)
  EXPECT_EQ(nfc("\u0344"), "\u0308\u0301");         // excluded non-starter decomposition
  EXPECT_EQ(nfc("e\xff\u0301"), "e\xff\u0301");     // a bad byte blocks composition
  EXPECT_EQ(nfc("\u0301e\xC3"), "\u0301e\xC3");
}

// ---------------------------------------------------------------------------------------
// Malformed input

class TokenizerFileErrors : public ::testing::Test {
 protected:
  fs::path write(const std::string& name, const std::string& content) {
    fs::path p = dir_ / name;  // not const: returned by move
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

// A minimal byte-level tokenizer.json: the 256 byte symbols, no merges, and `pre` /
// `normalizer` as given (JSON text).
std::string byte_level_json(const std::string& pre, const std::string& normalizer = "null") {
  std::string vocab;
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    std::string symbol;
    tokenizer::unicode::append_utf8(printable ? b : next++, symbol);
    if (symbol == "\"" || symbol == "\\") symbol = "\\" + symbol;
    vocab += (b ? ", \"" : "\"") + symbol + "\": " + std::to_string(b);
  }
  return R"({"model": {"type": "BPE", "vocab": {)" + vocab + R"(}, "merges": []}, "normalizer": )" + normalizer +
         R"(, "pre_tokenizer": )" + pre + "}";
}

std::string split_then_byte_level(const std::string& regex_json, const std::string& behavior = "Isolated") {
  return R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": )" + regex_json +
         R"(}, "behavior": ")" + behavior +
         R"(", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
}

TEST_F(TokenizerFileErrors, MinimalLlama3ShapedTokenizerJsonLoads) {
  const fs::path file =
      write("tokenizer.json",
            byte_level_json(split_then_byte_level(nlohmann::json(std::string(tokenizer::kLlama3SplitRegex)).dump())));
  EXPECT_EQ(ids_str(BpeTokenizer::from_hf_tokenizer_json(file).encode("a1")), "[97 49]");
}

TEST_F(TokenizerFileErrors, SplitWithAnotherRegexIsAnInvalidArgumentNamingTheFileAndTheField) {
  const fs::path file = write("tokenizer.json", byte_level_json(split_then_byte_level(R"("\\p{L}+|\\s+")")));
  try {
    BpeTokenizer::from_hf_tokenizer_json(file);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file.string()), HasSubstr("pretokenizers[0].pattern.Regex"),
                                HasSubstr("\\p{L}+|\\s+"), HasSubstr("Llama 3's or Qwen2's")));
  }
}

TEST_F(TokenizerFileErrors, SplitWithAnotherBehaviorIsAnInvalidArgumentNamingTheField) {
  const fs::path file =
      write("tokenizer.json", byte_level_json(split_then_byte_level(
                                  nlohmann::json(std::string(tokenizer::kQwen2SplitRegex)).dump(), "Removed")));
  try {
    BpeTokenizer::from_hf_tokenizer_json(file);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file.string()), HasSubstr("pretokenizers[0].behavior")));
  }
}

// A SentencePiece-style tokenizer.json with a Split by the String "-" (`behavior`) and no
// normalizer: each piece is merged on its own. Expected ids: HF tokenizers 0.23.3.
std::string split_by_dash_json(const std::string& behavior) {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "-": 2, "a-": 3, "-b": 4, "-a": 5, "--": 6, "b-": 7},
    "merges": [["a", "-"], ["-", "b"], ["-", "a"], ["-", "-"], ["b", "-"]]},
    "pre_tokenizer": {"type": "Split", "pattern": {"String": "-"}, "behavior": ")" +
         behavior + R"(", "invert": false}})";
}

TEST_F(TokenizerFileErrors, SentencePieceSplitByAStringSplitsAsHuggingFaceDoesForEveryBehavior) {
  const std::vector<std::array<std::string, 3>> expected = {// behavior, "a-b--a", "-a-"
                                                            {"Removed", "[0 1 0]", "[0]"},
                                                            {"Isolated", "[0 2 1 2 2 0]", "[2 0 2]"},
                                                            {"MergedWithPrevious", "[3 7 2 0]", "[2 3]"},
                                                            {"MergedWithNext", "[0 4 2 5]", "[5 2]"},
                                                            {"Contiguous", "[0 2 1 6 0]", "[2 0 2]"}};
  for (const auto& [behavior, first, second] : expected) {
    const BpeTokenizer tok =
        BpeTokenizer::from_hf_tokenizer_json(write("tokenizer.json", split_by_dash_json(behavior)));
    EXPECT_EQ(ids_str(tok.encode("a-b--a")), first) << behavior;
    EXPECT_EQ(ids_str(tok.encode("-a-")), second) << behavior;
  }
}

// Metaspace "first" prepends "▁" only to the section at the start of the text, "always" to
// every section between added tokens. Expected ids: HF tokenizers 0.23.3.
TEST_F(TokenizerFileErrors, MetaspaceFirstPrependsOnlyAtTheStartOfTheTextAlwaysBeforeEverySection) {
  for (const auto& [scheme, a_x_a, x_a] :
       std::vector<std::array<std::string, 3>>{{"first", "[2 3 1]", "[3 1]"}, {"always", "[2 3 2]", "[3 2]"}}) {
    const BpeTokenizer tok = BpeTokenizer::from_hf_tokenizer_json(write("tokenizer.json", R"({"model": {"type": "BPE",
      "vocab": {"\u2581": 0, "a": 1, "\u2581a": 2, "<x>": 3}, "merges": [["\u2581", "a"]]},
      "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": ")" + scheme +
                                                                                              R"(", "split": false},
      "added_tokens": [{"id": 3, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": false,
                        "normalized": false, "special": false}]})"));
    EXPECT_EQ(ids_str(tok.encode("a<x>a")), a_x_a) << scheme;
    EXPECT_EQ(ids_str(tok.encode("<x>a")), x_a) << scheme;
    EXPECT_EQ(ids_str(tok.encode("a a<x>")), "[2 2 3]") << scheme;
  }
}

// A special added token is found and left as plain text, so a non-special one inside it is
// not found (HF's matcher skips the special match whole); leftmost, longest first.
// Expected ids: HF tokenizers 0.23.3.
TEST_F(TokenizerFileErrors, SpecialAddedTokensShadowNonSpecialOnesInsideThemAsInHuggingFace) {
  const BpeTokenizer tok = BpeTokenizer::from_hf_tokenizer_json(write("tokenizer.json", R"({"model": {"type": "BPE",
    "vocab": {"\u2581": 0, "a": 1, "\u2581a": 2, "x": 3, "y": 4, "z": 5, "<y>": 6, "x<y>": 7, "<": 8, ">": 9},
    "merges": [["\u2581", "a"]]},
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "added_tokens": [
      {"id": 6, "content": "<y>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
       "special": false},
      {"id": 7, "content": "x<y>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
       "special": true}]})"));
  EXPECT_EQ(ids_str(tok.encode("a<y>a")), "[2 6 2]");
  EXPECT_EQ(ids_str(tok.encode("x<y>a")), "[0 3 8 4 9 1]");
  EXPECT_EQ(ids_str(tok.encode("zx<y><y>")), "[0 5 3 8 4 9 6]");
  EXPECT_EQ(ids_str(tok.encode("<y>")), "[6]");
  EXPECT_EQ(ids_str(tok.encode("")), "[]");
}

TEST_F(TokenizerFileErrors, NonSpecialAddedTokenMatchedAfterTheNormalizerIsAnInvalidArgumentNamingIt) {
  const fs::path file = write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "<x>": 1}, "merges": []},
    "added_tokens": [{"id": 1, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": true, "special": false}]})");
  try {
    BpeTokenizer::from_hf_tokenizer_json(file);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file.string()), HasSubstr("'<x>'"), HasSubstr("normalized")));
  }
}

TEST_F(TokenizerFileErrors, SentencePieceSplitByARegexIsAnInvalidArgumentNamingThePattern) {
  const fs::path file = write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a+"}, "behavior": "Isolated", "invert": false}})");
  try {
    BpeTokenizer::from_hf_tokenizer_json(file);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file.string()), HasSubstr("pre_tokenizer (Split)"), HasSubstr("String")));
  }
}

// A GGUF file with tokenizer.ggml.model "gpt2", one token and tokenizer.ggml.pre = `pre`
// (none if empty): the keys the loader reads before it refuses a pre-tokenizer.
std::string gguf_with_pre(const std::string& pre) {
  std::string out = "GGUF";
  auto u32 = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& v) {
    u64(v.size());
    out += v;
  };
  u32(3);                    // version
  u64(0);                    // tensors
  u64(pre.empty() ? 2 : 3);  // metadata keys
  str("tokenizer.ggml.model");
  u32(8);  // string
  str("gpt2");
  str("tokenizer.ggml.tokens");
  u32(9);  // array
  u32(8);  // of strings
  u64(1);
  str("a");
  if (!pre.empty()) {
    str("tokenizer.ggml.pre");
    u32(8);
    str(pre);
  }
  return out;
}

TEST_F(TokenizerFileErrors, GgufPreTokenizerFsdppDoesNotImplementIsAnInvalidArgumentNamingFileAndValue) {
  const fs::path file = write("starcoder.gguf", gguf_with_pre("starcoder"));
  try {
    BpeTokenizer::from_gguf_vocab(file);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file.string()), HasSubstr("tokenizer.ggml.pre is \"starcoder\""),
                                HasSubstr("expected \"gpt-2\", \"llama-bpe\", \"qwen2\" or \"falcon\"")));
  }
}

TEST_F(TokenizerFileErrors, GgufWithoutPreTokenizerIsAnInvalidArgumentNamingFileAndKey) {
  const fs::path file = write("no_pre.gguf", gguf_with_pre(""));
  try {
    BpeTokenizer::from_gguf_vocab(file);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file.string()), HasSubstr("tokenizer.ggml.pre is missing")));
  }
}

TEST_F(TokenizerFileErrors, ByteLevelWithANormalizerOtherThanNfcIsAnInvalidArgumentNamingTheType) {
  const fs::path file = write("tokenizer.json", byte_level_json(R"({"type": "ByteLevel"})", R"({"type": "NFKC"})"));
  try {
    BpeTokenizer::from_hf_tokenizer_json(file);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file.string()), HasSubstr("normalizer.type is \"NFKC\""),
                                HasSubstr("expected \"NFC\" or null")));
  }
}

TEST(TokenizerDecode, IdOutsideTheVocabularyIsOutOfRange) {
  EXPECT_THROW(gpt2().decode({50257}), std::out_of_range);
  EXPECT_THROW(llama2().decode({-1}), std::out_of_range);
}

}  // namespace
}  // namespace fsdpp
