#include "core/tokenizer/bpe_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/io/json_depth.h"
#include "core/tokenizer/falcon_pretokenizer.h"
#include "core/tokenizer/gguf_vocab.h"
#include "core/tokenizer/gpt2_pretokenizer.h"
#include "core/tokenizer/llama3_pretokenizer.h"
#include "core/tokenizer/nfc.h"
#include "core/tokenizer/unicode.h"

namespace fsdpp::tokenizer {
namespace {

using nlohmann::json;

const char* const kHfExpectation = "a Hugging Face tokenizer.json with model.type \"BPE\"";

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

std::string read_file(const std::filesystem::path& path, const std::string& expected) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("tokenizer: cannot open " + quoted(path) + " (expected " + expected + ")");
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) throw std::runtime_error("tokenizer: cannot read " + quoted(path));
  return content.str();
}

json parse_json(const std::filesystem::path& path, const std::string& expected) {
  const std::string text = read_file(path, expected);
  if (const auto problem = io::json_depth_problem(text); !problem.empty())
    throw std::invalid_argument("tokenizer: " + quoted(path) + " is not valid JSON (expected " + expected +
                                "): " + problem);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument("tokenizer: " + quoted(path) + " is not valid JSON (expected " + expected +
                                "): " + e.what());
  }
}

[[noreturn]] void reject(const std::string& source, const std::string& what) {
  throw std::invalid_argument("tokenizer: " + source + ": " + what);
}

// GPT-2's bytes_to_unicode (encoder.py): printable Latin-1 bytes stand for themselves, the
// other 68 bytes take the code points 256, 257, ... in byte order, so that every token of a
// byte-level vocabulary is printable text.
std::array<uint32_t, 256> bytes_to_unicode() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

// "<0xAB>" -> 0xAB; -1 for anything else (SentencePiece's byte-fallback token names).
int byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    value *= 16;
    if (c >= '0' && c <= '9')
      value += c - '0';
    else if (c >= 'A' && c <= 'F')
      value += c - 'A' + 10;
    else
      return -1;
  }
  return value;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  // An empty `from` is found nowhere (the inverse of a Replace that deletes its pattern).
  if (from.empty()) return std::string(s);
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos)).append(to);
  }
  return out.append(s.substr(pos));
}

const json* field(const json& object, const char* key) {
  const auto it = object.find(key);
  return (it == object.end() || it->is_null()) ? nullptr : &*it;
}

// Ids index a dense table (id -> token), which the largest id sizes: a vocabulary may leave
// ids unused, as Hugging Face's allow, but no more than this many beyond its token count.
constexpr int64_t kMaxUnusedIds = 65536;

// Refuses an id that would size the table far beyond the `entries` tokens the file defines.
void check_id_fits(const std::string& token, int64_t id, size_t entries, const std::string& source) {
  const int64_t limit = static_cast<int64_t>(entries) + kMaxUnusedIds;
  if (id >= limit)
    reject(source, "token '" + token + "' has id " + std::to_string(id) + "; expected an id below " +
                       std::to_string(limit) + " (the file's " + std::to_string(entries) + " tokens plus " +
                       std::to_string(kMaxUnusedIds) + " unused ids)");
}

std::string type_of(const json& node, const std::string& source, const std::string& where) {
  const json* type = node.is_object() ? field(node, "type") : nullptr;
  if (!type || !type->is_string()) reject(source, where + " has no string field \"type\"");
  return type->get<std::string>();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Loading

void BpeTokenizer::add_vocab_entry(const std::string& token, int64_t id, const std::string& source) {
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    reject(source, "token '" + token + "' has id " + std::to_string(id) + "; expected 0 <= id < 2^31");
  }
  const auto id32 = static_cast<int32_t>(id);
  if (static_cast<size_t>(id32) >= tokens_.size()) tokens_.resize(id32 + 1);
  if (const auto it = ids_.find(token); it != ids_.end() && it->second != id32) {
    reject(source, "token '" + token + "' has two ids, " + std::to_string(it->second) + " and " + std::to_string(id32));
  }
  tokens_[id32] = token;
  ids_[token] = id32;
}

int32_t BpeTokenizer::find_id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token) const {
  const int32_t id = find_id(token);
  return id < 0 ? std::nullopt : std::optional<int32_t>(id);
}

void BpeTokenizer::add_merge(std::string_view left, std::string_view right, const std::string& source) {
  const int32_t a = find_id(left), b = find_id(right);
  const int32_t merged = find_id(std::string(left) + std::string(right));
  if (a < 0 || b < 0 || merged < 0) {
    reject(source, "merge '" + std::string(left) + " " + std::string(right) +
                       "' uses a token that is not in the vocabulary (left, right and their "
                       "concatenation must all be tokens)");
  }
  const uint64_t key = (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
  // The first occurrence has the higher priority; a repeated merge keeps it (as GPT-2's
  // dict(zip(merges, range(...))) would not, but no real vocabulary repeats a merge).
  merges_.emplace(key, Merge{static_cast<int32_t>(merges_.size()), merged});
}

void BpeTokenizer::finish_byte_level(const std::string& source) {
  kind_ = Kind::kByteLevel;
  const std::array<uint32_t, 256> byte_cp = bytes_to_unicode();
  std::unordered_map<uint32_t, uint8_t> cp_byte;
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    unicode::append_utf8(byte_cp[b], symbol);
    // A vocabulary may lack the symbol of a byte its training text never had (Falcon's
    // lacks 28: control bytes, bytes that UTF-8 never uses); encode() refuses such a byte.
    byte_symbol_ids_[b] = find_id(symbol);
    cp_byte[byte_cp[b]] = static_cast<uint8_t>(b);
  }
  // Each token decodes to the bytes its characters stand for; a token with a character
  // outside the byte alphabet (an added token such as "<|endoftext|>") decodes verbatim.
  decoded_.assign(tokens_.size(), std::string());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const std::string& token = tokens_[id];
    std::string bytes;
    bool all_bytes = true;
    for (size_t pos = 0; pos < token.size() && all_bytes;) {
      const unicode::CodePoint cp = unicode::decode_utf8(token, pos);
      const auto it = cp_byte.find(cp.value);
      if (it == cp_byte.end())
        all_bytes = false;
      else
        bytes += static_cast<char>(it->second);
      pos += cp.byte_len;
    }
    decoded_[id] = all_bytes ? bytes : token;
  }
}

void BpeTokenizer::finish_sentencepiece(const std::string& source) {
  kind_ = Kind::kSentencePiece;
  byte_fallback_ids_.fill(-1);
  decoded_.assign(tokens_.size(), std::string());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const int byte = byte_fallback_value(tokens_[id]);
    if (byte >= 0) {
      byte_fallback_ids_[byte] = static_cast<int32_t>(id);
      decoded_[id] = std::string(1, static_cast<char>(byte));
    } else {
      // The inverse of the normalizer's replacements ("▁" -> " "), as the HF decoder does.
      std::string text = tokens_[id];
      for (const NormalizerStep& step : normalizer_) {
        if (step.op == NormalizerStep::Op::kReplace) text = replace_all(text, step.to, step.from);
      }
      decoded_[id] = text;
    }
  }
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      if (byte_fallback_ids_[b] < 0)
        reject(source, "byte_fallback is on but token <0x..> for byte " + std::to_string(b) + " is missing");
    }
  }
}

BpeTokenizer BpeTokenizer::from_gpt2_files(const std::filesystem::path& vocab_json,
                                           const std::filesystem::path& merges_txt) {
  BpeTokenizer tok;
  const json vocab = parse_json(vocab_json, "GPT-2 vocab.json: an object mapping token to id");
  if (!vocab.is_object()) reject(quoted(vocab_json), "expected a JSON object mapping token to id");
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) reject(quoted(vocab_json), "id of token '" + token + "' is not an integer");
    check_id_fits(token, id.get<int64_t>(), vocab.size(), quoted(vocab_json));
    tok.add_vocab_entry(token, id.get<int64_t>(), quoted(vocab_json));
  }

  const std::string merges = read_file(merges_txt, "GPT-2 merges.txt: one \"left right\" merge per line");
  std::istringstream lines(merges);
  size_t line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    const std::string where = quoted(merges_txt) + " line " + std::to_string(line_no);
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      reject(where, "expected \"left right\" (two tokens, one space), got '" + line + "'");
    }
    tok.add_merge(std::string_view(line).substr(0, space), std::string_view(line).substr(space + 1), where);
  }
  // GPT-2's <|endoftext|> is special: it decodes to nothing.
  tok.finish_byte_level(quoted(vocab_json));
  if (const int32_t eot = tok.find_id("<|endoftext|>"); eot >= 0) tok.decoded_[eot].clear();
  return tok;
}

BpeTokenizer BpeTokenizer::from_hf_tokenizer_json(const std::filesystem::path& tokenizer_json) {
  const std::string source = quoted(tokenizer_json);
  const json root = parse_json(tokenizer_json, kHfExpectation);
  try {
    return from_hf_json_value(root, source);
  } catch (const json::exception& e) {
    // A field of the wrong JSON type (e.g. a string where an id belongs).
    reject(source, std::string("unexpected structure: ") + e.what() + "; expected " + kHfExpectation);
  }
}

BpeTokenizer BpeTokenizer::from_hf_json_value(const nlohmann::json& root, const std::string& source) {
  const json* model = root.is_object() ? field(root, "model") : nullptr;
  if (!model || !model->is_object()) reject(source, std::string("no object \"model\"; expected ") + kHfExpectation);
  const std::string model_type = type_of(*model, source, "model");
  if (model_type != "BPE") reject(source, "model.type is \"" + model_type + "\"; expected \"BPE\"");

  BpeTokenizer tok;
  if (const json* dropout = field(*model, "dropout"); dropout && dropout->get<double>() != 0.0) {
    reject(source, "model.dropout is set; expected null (encoding must be deterministic)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = field(*model, key); v && !v->get<std::string>().empty()) {
      reject(source, std::string("model.") + key + " is set; expected null (not supported)");
    }
  }
  if (const json* v = field(*model, "ignore_merges")) tok.ignore_merges_ = v->get<bool>();
  if (const json* v = field(*model, "byte_fallback")) tok.byte_fallback_ = v->get<bool>();
  if (const json* v = field(*model, "fuse_unk")) tok.fuse_unk_ = v->get<bool>();

  const json* vocab = field(*model, "vocab");
  const json* merges = field(*model, "merges");
  if (!vocab || !vocab->is_object()) reject(source, "model.vocab is not an object mapping token to id");
  if (!merges || !merges->is_array()) reject(source, "model.merges is not an array");
  const json* added = field(root, "added_tokens");
  const size_t entries = vocab->size() + (added ? added->size() : 0);
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer()) reject(source, "model.vocab: id of token '" + token + "' is not an integer");
    check_id_fits(token, id.get<int64_t>(), entries, source);
    tok.add_vocab_entry(token, id.get<int64_t>(), source);
  }
  std::vector<int32_t> special_ids;
  if (added) {
    for (const json& t : *added) {
      check_id_fits(t.at("content").get<std::string>(), t.at("id").get<int64_t>(), entries, source);
      tok.add_vocab_entry(t.at("content").get<std::string>(), t.at("id").get<int64_t>(), source);
      if (t.value("special", false)) special_ids.push_back(t.at("id").get<int32_t>());
    }
    add_added_tokens(tok, *added, source);
  }
  // A merge is "left right" (tokenizers < 0.20) or ["left", "right"].
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    const std::string where = source + " model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) reject(where, "expected \"left right\", got '" + s + "'");
      tok.add_merge(std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1), where);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      tok.add_merge(m[0].get<std::string>(), m[1].get<std::string>(), where);
    } else {
      reject(where, "expected \"left right\" or [\"left\", \"right\"]");
    }
  }

  const json* pre = field(root, "pre_tokenizer");
  const json* normalizer = field(root, "normalizer");
  const std::string pre_type = pre ? type_of(*pre, source, "pre_tokenizer") : "";
  if (pre && pre_type != "ByteLevel" && pre_type != "Metaspace" && pre_type != "Sequence" && pre_type != "Split") {
    reject(source, "pre_tokenizer.type is \"" + pre_type +
                       "\"; expected \"ByteLevel\", \"Metaspace\", \"Sequence\" (of Split and ByteLevel), \"Split\" "
                       "(by a String) or null");
  }
  if (pre_type == "ByteLevel" || pre_type == "Sequence") {
    // Byte-level: the normalizer may be NFC (Qwen2's Hub files), applied before splitting.
    if (normalizer) {
      const std::string type = type_of(*normalizer, source, "normalizer");
      if (type != "NFC")
        reject(source, "normalizer.type is \"" + type + "\" in a byte-level tokenizer; expected \"NFC\" or null");
      tok.nfc_ = true;
    }
    set_byte_level_pre_tokenizer(tok, *pre, source);
    tok.finish_byte_level(source);
  } else {
    // SentencePiece-style: the normalizer is the only text transformation.
    std::vector<const json*> steps;
    if (normalizer && type_of(*normalizer, source, "normalizer") == "Sequence") {
      for (const json& n : normalizer->at("normalizers")) steps.push_back(&n);
    } else if (normalizer) {
      steps.push_back(normalizer);
    }
    for (const json* n : steps) {
      const std::string type = type_of(*n, source, "normalizer");
      if (type == "Prepend") {
        tok.normalizer_.push_back({NormalizerStep::Op::kPrepend, "", n->at("prepend").get<std::string>()});
      } else if (type == "Replace" && n->at("pattern").contains("String")) {
        if (n->at("pattern").at("String").get<std::string>().empty())
          reject(source, "normalizer Replace has an empty String pattern; expected the text to replace");
        tok.normalizer_.push_back({NormalizerStep::Op::kReplace, n->at("pattern").at("String").get<std::string>(),
                                   n->at("content").get<std::string>()});
      } else {
        reject(source, "normalizer \"" + type + "\" is not supported; expected Prepend or Replace(String)");
      }
    }
    if (pre_type == "Metaspace") add_metaspace(tok, *pre, source);
    if (pre_type == "Split") add_split(tok, *pre, source);
    if (const json* unk = field(*model, "unk_token")) tok.unk_id_ = tok.find_id(unk->get<std::string>());
    tok.finish_sentencepiece(source);
  }
  for (int32_t id : special_ids) tok.decoded_[id].clear();
  return tok;
}

// A byte-level pre_tokenizer: ByteLevel alone (GPT-2's regex when use_regex, else no
// split), or a Sequence that is exactly
//  - Llama 3's or Qwen2's: a Split by their regex (behavior "Isolated", invert false: every
//    match is a piece, and so is every gap between matches, which these patterns never
//    leave) and a ByteLevel with use_regex false, as their Hub files and transformers' GGUF
//    conversion write it; or
//  - Falcon's: Punctuation (Contiguous), ByteLevel (use_regex true), Digits
//    (individual_digits false), Split "[0-9][0-9][0-9]" (Isolated, invert false).
// Other patterns and sequences are refused: fsdpp has no regex engine, only these
// hand-written splitters. A ByteLevel inside a Sequence must have add_prefix_space false
// (it would prefix every piece).
void BpeTokenizer::set_byte_level_pre_tokenizer(BpeTokenizer& tok, const json& pre, const std::string& source) {
  const std::string type = type_of(pre, source, "pre_tokenizer");
  if (type == "ByteLevel") {
    tok.add_prefix_space_ = pre.value("add_prefix_space", false);
    tok.pre_tokenizer_ = pre.value("use_regex", true) ? PreTokenizer::kGpt2 : PreTokenizer::kNone;
    return;
  }
  const std::string where = source + " pre_tokenizer (Sequence)";
  const std::string expected =
      "expected Llama 3's or Qwen2's [Split (their Regex, behavior \"Isolated\", invert false), ByteLevel "
      "(use_regex false, add_prefix_space false)] or Falcon's [Punctuation (\"Contiguous\"), ByteLevel (use_regex "
      "true, add_prefix_space false), Digits (individual_digits false), Split (Regex \"[0-9][0-9][0-9]\", "
      "\"Isolated\", invert false)]";
  const json* steps = field(pre, "pretokenizers");
  if (!steps || !steps->is_array() || (steps->size() != 2 && steps->size() != 4))
    reject(where, "pretokenizers: " + expected);
  const bool falcon = steps->size() == 4;
  const std::vector<std::string> want_types =
      falcon ? std::vector<std::string>{"Punctuation", "ByteLevel", "Digits", "Split"}
             : std::vector<std::string>{"Split", "ByteLevel"};
  for (size_t i = 0; i < steps->size(); ++i) {
    const std::string name = "pretokenizers[" + std::to_string(i) + "]";
    const std::string step_type = type_of((*steps)[i], source, "pre_tokenizer." + name);
    if (step_type != want_types[i]) reject(where, name + ".type is \"" + step_type + "\"; " + expected);
  }
  const size_t split_at = falcon ? 3 : 0;
  const std::string split_name = "pretokenizers[" + std::to_string(split_at) + "]";
  const json& split = (*steps)[split_at];
  const json& byte_level = (*steps)[1];  // second in both sequences
  const json* pattern = field(split, "pattern");
  const json* regex = pattern && pattern->is_object() ? field(*pattern, "Regex") : nullptr;
  if (!regex || !regex->is_string()) reject(where, split_name + ".pattern has no string \"Regex\"; " + expected);
  const std::string re = regex->get<std::string>();
  if (falcon && re == "[0-9][0-9][0-9]") {
    tok.pre_tokenizer_ = PreTokenizer::kFalcon;
  } else if (!falcon && re == kLlama3SplitRegex) {
    tok.pre_tokenizer_ = PreTokenizer::kLlama3;
  } else if (!falcon && re == kQwen2SplitRegex) {
    tok.pre_tokenizer_ = PreTokenizer::kQwen2;
  } else {
    reject(where, split_name + ".pattern.Regex '" + re +
                      "' is not a pattern fsdpp implements in this Sequence (see "
                      "core/tokenizer/llama3_pretokenizer.h, falcon_pretokenizer.h); " +
                      expected);
  }
  if (split.value("behavior", "") != "Isolated")
    reject(where, split_name + ".behavior is not \"Isolated\"; " + expected);
  if (split.value("invert", true)) reject(where, split_name + ".invert is not false; " + expected);
  if (byte_level.value("add_prefix_space", true))
    reject(where, "pretokenizers[1].add_prefix_space is not false; " + expected);
  if (byte_level.value("use_regex", true) != falcon)
    reject(where, std::string("pretokenizers[1].use_regex is not ") + (falcon ? "true" : "false") + "; " + expected);
  if (falcon && (*steps)[0].value("behavior", "") != "Contiguous")
    reject(where, "pretokenizers[0].behavior is not \"Contiguous\"; " + expected);
  if (falcon && (*steps)[2].value("individual_digits", true))
    reject(where, "pretokenizers[2].individual_digits is not false; " + expected);
}

// HF tokenizers' Metaspace pre-tokenizer (pre_tokenizers/metaspace.rs): " " -> replacement,
// then the replacement prepended unless the text starts with it ("always": every section
// between added tokens; "first": only the section at offset 0 of the text; "never": none);
// older files say add_prefix_space instead of prepend_scheme.
void BpeTokenizer::add_metaspace(BpeTokenizer& tok, const json& pre, const std::string& source) {
  const std::string where = source + " pre_tokenizer (Metaspace)";
  const json* replacement = field(pre, "replacement");
  if (!replacement || !replacement->is_string() || replacement->get<std::string>().empty()) {
    reject(where, "expected a non-empty string \"replacement\"");
  }
  const std::string rep = replacement->get<std::string>();
  std::string scheme = pre.value("add_prefix_space", true) ? "always" : "never";
  if (const json* s = field(pre, "prepend_scheme")) {
    if (!s->is_string()) reject(where, "prepend_scheme must be a string");
    scheme = s->get<std::string>();
  }
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    reject(where, "prepend_scheme is \"" + scheme + "\"; expected \"always\", \"first\" or \"never\"");
  }
  tok.normalizer_.push_back({NormalizerStep::Op::kReplace, " ", rep});
  if (scheme != "never")
    tok.normalizer_.push_back({NormalizerStep::Op::kPrependUnlessPresent, "", rep, scheme == "first"});
  if (pre.value("split", true)) tok.split_before_ = rep;
}

// HF tokenizers' Split pre-tokenizer by a String pattern (pre_tokenizers/split.rs), on a
// SentencePiece-style text after its normalizer: what transformers 5 writes for Gemma
// (" ", MergedWithPrevious; a no-op there, the normalizer having replaced every " ").
// A Regex pattern is refused: fsdpp has no regex engine.
void BpeTokenizer::add_split(BpeTokenizer& tok, const json& pre, const std::string& source) {
  const std::string where = source + " pre_tokenizer (Split)";
  const json* pattern = field(pre, "pattern");
  if (!pattern || !pattern->is_object() || !pattern->contains("String") || !pattern->at("String").is_string() ||
      pattern->at("String").get<std::string>().empty()) {
    reject(where,
           "pattern is not a non-empty {\"String\": ...}; expected a String pattern (a Regex one is not "
           "supported without a byte-level pre-tokenizer)");
  }
  if (pre.value("invert", false)) reject(where, "invert is true; expected false");
  const std::string behavior = pre.value("behavior", "");
  static const std::vector<std::pair<std::string, SplitBehavior>> kBehaviors = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  const auto it =
      std::find_if(kBehaviors.begin(), kBehaviors.end(), [&](const auto& b) { return b.first == behavior; });
  if (it == kBehaviors.end())
    reject(where, "behavior is \"" + behavior +
                      "\"; expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
  tok.split_pattern_ = pattern->at("String").get<std::string>();
  tok.split_behavior_ = it->second;
}

// The added tokens that HF tokenizers finds in the raw text (added_vocabulary.rs: those with
// normalized false, matched leftmost-longest before the normalizer). A special one is found
// and left as plain text (encode_special_tokens, fsdpp's rule); a non-special one (a
// SentencePiece user-defined piece) becomes its id. Non-special tokens matched after the
// normalizer (normalized true) or with lstrip / rstrip / single_word are refused.
void BpeTokenizer::add_added_tokens(BpeTokenizer& tok, const json& added, const std::string& source) {
  for (const json& t : added) {
    const std::string content = t.at("content").get<std::string>();
    const bool special = t.value("special", false);
    // tokenizers' AddedToken default: normalized = !special.
    const bool normalized = t.contains("normalized") ? t.at("normalized").get<bool>() : !special;
    if (content.empty() || (special && normalized)) continue;  // never found in the raw text
    if (!special) {
      for (const char* key : {"normalized", "lstrip", "rstrip", "single_word"}) {
        if (t.value(key, false))
          reject(source, "added token '" + content + "' (not special) has " + key +
                             " true; expected false (fsdpp finds non-special added tokens in the raw text only)");
      }
    }
    tok.added_.push_back({content, t.at("id").get<int32_t>(), special});
  }
  for (size_t i = 0; i < tok.added_.size(); ++i) {
    tok.added_by_first_byte_[static_cast<unsigned char>(tok.added_[i].content[0])].push_back(static_cast<int32_t>(i));
  }
  for (auto& list : tok.added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [&](int32_t a, int32_t b) { return tok.added_[a].content.size() > tok.added_[b].content.size(); });
  }
}

BpeTokenizer BpeTokenizer::from_gguf_vocab(const std::filesystem::path& gguf) {
  const std::string source = quoted(gguf);
  const GgufVocab vocab = read_gguf_vocab(gguf);
  BpeTokenizer tok;
  for (size_t id = 0; id < vocab.tokens.size(); ++id)
    tok.add_vocab_entry(vocab.tokens[id], static_cast<int64_t>(id), source);
  constexpr int32_t kControlType = 3;  // llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
  if (vocab.model == "gpt2") {
    // tokenizer.ggml.pre names the pre-tokenizer, as llama.cpp's llama_vocab::load reads it;
    // llama.cpp's "llama-bpe" also ignores merges for a word that is itself a token.
    if (vocab.pre == "gpt-2") {
      tok.pre_tokenizer_ = PreTokenizer::kGpt2;
    } else if (vocab.pre == "llama-bpe") {
      tok.pre_tokenizer_ = PreTokenizer::kLlama3;
      tok.ignore_merges_ = true;
    } else if (vocab.pre == "qwen2") {
      tok.pre_tokenizer_ = PreTokenizer::kQwen2;
    } else if (vocab.pre == "falcon") {
      tok.pre_tokenizer_ = PreTokenizer::kFalcon;
    } else if (vocab.pre.empty()) {
      reject(source,
             "tokenizer.ggml.pre is missing for tokenizer.ggml.model \"gpt2\" (llama.cpp would use its "
             "\"default\" pre-tokenizer, which fsdpp does not implement); expected \"gpt-2\", \"llama-bpe\", "
             "\"qwen2\" or \"falcon\"");
    } else {
      reject(source, "tokenizer.ggml.pre is \"" + vocab.pre +
                         "\" for tokenizer.ggml.model \"gpt2\"; expected \"gpt-2\", \"llama-bpe\", \"qwen2\" or "
                         "\"falcon\" (the pre-tokenizers fsdpp implements)");
    }
    for (size_t i = 0; i < vocab.merges.size(); ++i) {
      const std::string& m = vocab.merges[i];
      const size_t space = m.find(' ');
      const std::string where = source + " tokenizer.ggml.merges[" + std::to_string(i) + "]";
      if (space == std::string::npos) reject(where, "expected \"left right\", got '" + m + "'");
      tok.add_merge(std::string_view(m).substr(0, space), std::string_view(m).substr(space + 1), where);
    }
    tok.finish_byte_level(source);
  } else if (vocab.model == "llama") {
    // llama.cpp ignores tokenizer.ggml.pre for SentencePiece; anything but "default" would
    // promise a pre-tokenizer that is not applied, so it is refused.
    if (!vocab.pre.empty() && vocab.pre != "default")
      reject(source, "tokenizer.ggml.pre is \"" + vocab.pre +
                         "\" for tokenizer.ggml.model \"llama\"; expected \"default\" or none");
    if (vocab.scores.size() != vocab.tokens.size()) reject(source, "tokenizer.ggml.scores is missing");
    // What llama.cpp does for a "llama" vocabulary: " " -> "▁", a "▁" prefix
    // (add_space_prefix), byte fallback to <0xXX>, merges by score.
    if (vocab.add_space_prefix) tok.normalizer_.push_back({NormalizerStep::Op::kPrepend, "", "\u2581"});
    tok.normalizer_.push_back({NormalizerStep::Op::kReplace, " ", "\u2581"});
    tok.byte_fallback_ = true;
    // Dense ranks of the scores, highest score first.
    std::vector<float> distinct = vocab.scores;
    std::sort(distinct.begin(), distinct.end(), std::greater<>());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    tok.score_rank_.resize(vocab.scores.size());
    for (size_t id = 0; id < vocab.scores.size(); ++id) {
      tok.score_rank_[id] = static_cast<int32_t>(
          std::lower_bound(distinct.begin(), distinct.end(), vocab.scores[id], std::greater<>()) - distinct.begin());
    }
    tok.finish_sentencepiece(source);
  } else {
    reject(source, "tokenizer.ggml.model is \"" + vocab.model + "\"; expected \"llama\" or \"gpt2\"");
  }
  for (size_t id = 0; id < vocab.token_types.size(); ++id) {
    if (vocab.token_types[id] == kControlType) tok.decoded_[id].clear();
  }
  return tok;
}

const std::string& BpeTokenizer::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) {
    throw std::out_of_range("tokenizer: token id " + std::to_string(id) + " outside [0, " +
                            std::to_string(tokens_.size()) + ")");
  }
  return tokens_[id];
}

// ---------------------------------------------------------------------------------------
// Encoding

// Rank-ordered BPE on one word, the algorithm of Hugging Face tokenizers' Word::merge_all
// and llama.cpp's llm_tokenizer_bpe: repeatedly merge the adjacent pair with the lowest
// merge rank, the leftmost one among equal ranks, until no adjacent pair has a merge.
// (SentencePiece's rule, used with scores: merge the adjacent pair whose concatenation is
// the highest-scoring token, leftmost among equal scores; llm_tokenizer_spm.)
// Symbols form a linked list; a heap holds candidate pairs, stale ones skipped when popped.
bool BpeTokenizer::find_merge(int32_t left, int32_t right, Merge& merge) const {
  if (score_rank_.empty()) {
    const auto it = merges_.find((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right));
    if (it == merges_.end()) return false;
    merge = it->second;
    return true;
  }
  const int32_t merged = find_id(tokens_[left] + tokens_[right]);
  if (merged < 0) return false;
  merge = Merge{score_rank_[merged], merged};
  return true;
}

void BpeTokenizer::merge_word(std::vector<int32_t> symbols, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(symbols.size());
  std::vector<int32_t> next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  // (rank, left position, left id, right id, right position): min-heap by rank then position.
  using Candidate = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const int32_t right = next[left];
    Merge merge{};
    if (find_merge(symbols[left], symbols[right], merge))
      heap.emplace(merge.rank, left, symbols[left], symbols[right], right);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);

  while (!heap.empty()) {
    const auto [rank, left, left_id, right_id, right] = heap.top();
    heap.pop();
    // Stale: one side merged since (its id changed) or no longer adjacent.
    if (symbols[left] != left_id || next[left] != right || symbols[right] != right_id) continue;
    Merge merge{};
    find_merge(left_id, right_id, merge);
    symbols[left] = merge.merged_id;
    symbols[right] = -1;
    next[left] = next[right];
    if (next[left] >= 0) prev[next[left]] = left;
    push(prev[left]);
    push(left);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = next[i]) out.push_back(symbols[i]);
}

void BpeTokenizer::encode_byte_level(std::string_view text, std::vector<int32_t>& out) const {
  // HF order: the normalizer, then the pre-tokenizer (ByteLevel's prefix space, the split).
  std::string normalized;
  if (nfc_) {
    normalized = unicode::nfc(text);
    text = normalized;
  }
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<std::string_view> pieces;
  switch (pre_tokenizer_) {
    case PreTokenizer::kGpt2: pieces = split_gpt2_pieces(text); break;
    case PreTokenizer::kLlama3: pieces = split_llama3_pieces(text, 3); break;
    case PreTokenizer::kQwen2: pieces = split_llama3_pieces(text, 1); break;
    case PreTokenizer::kFalcon: pieces = split_falcon_pieces(text); break;
    case PreTokenizer::kNone:
      if (!text.empty()) pieces.push_back(text);
      break;
  }
  const std::array<uint32_t, 256> byte_cp = bytes_to_unicode();
  for (std::string_view piece : pieces) {
    std::vector<int32_t> symbols;
    symbols.reserve(piece.size());
    for (unsigned char b : piece) {
      // Hugging Face tokenizers drops a byte whose symbol is not a token (no unk_token in a
      // byte-level BPE): fsdpp refuses rather than lose text silently.
      if (byte_symbol_ids_[b] < 0) {
        throw std::invalid_argument("tokenizer: text has the byte " + std::to_string(b) +
                                    ", whose byte-level symbol is not in the vocabulary (Hugging Face tokenizers "
                                    "would drop it; fsdpp refuses)");
      }
      symbols.push_back(byte_symbol_ids_[b]);
    }
    if (ignore_merges_) {
      std::string as_token;
      for (unsigned char b : piece) unicode::append_utf8(byte_cp[b], as_token);
      if (const int32_t id = find_id(as_token); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    merge_word(std::move(symbols), out);
  }
}

void BpeTokenizer::encode_sentencepiece(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  // Normalizer, in order (HF Prepend leaves an empty text empty).
  std::string normalized(text);
  for (const NormalizerStep& step : normalizer_) {
    if (step.op == NormalizerStep::Op::kPrepend) {
      if (!normalized.empty()) normalized = step.to + normalized;
    } else if (step.op == NormalizerStep::Op::kPrependUnlessPresent) {
      if (!normalized.empty() && (at_start || !step.first_only) && normalized.compare(0, step.to.size(), step.to) != 0)
        normalized = step.to + normalized;
    } else {
      normalized = replace_all(normalized, step.from, step.to);
    }
  }
  // Metaspace with split: each word starting at a replacement is merged on its own.
  if (!split_before_.empty()) {
    size_t begin = 0;
    while (begin < normalized.size()) {
      size_t end = normalized.find(split_before_, begin + 1);
      if (end == std::string::npos) end = normalized.size();
      merge_sentencepiece_word(std::string_view(normalized).substr(begin, end - begin), out);
      begin = end;
    }
    return;
  }
  if (!split_pattern_.empty()) {
    // HF Split by a String: the matches and the text between them (tokenizers'
    // NormalizedString::split), each resulting piece merged on its own.
    const std::string_view all(normalized);
    const size_t plen = split_pattern_.size();
    std::vector<std::pair<std::string_view, bool>> spans;  // (text, is a match), covering `all`
    size_t prev = 0;
    for (size_t hit; (hit = all.find(split_pattern_, prev)) != std::string_view::npos; prev = hit + plen) {
      if (hit > prev) spans.emplace_back(all.substr(prev, hit - prev), false);
      spans.emplace_back(all.substr(hit, plen), true);
    }
    if (prev < all.size()) spans.emplace_back(all.substr(prev), false);
    std::vector<std::string_view> pieces;
    auto extend = [](std::string_view a, std::string_view b) {
      return std::string_view(a.data(), a.size() + b.size());
    };
    switch (split_behavior_) {
      case SplitBehavior::kRemoved:
        for (const auto& [span, match] : spans)
          if (!match) pieces.push_back(span);
        break;
      case SplitBehavior::kIsolated:
        for (const auto& span : spans) pieces.push_back(span.first);
        break;
      case SplitBehavior::kContiguous:
        for (size_t i = 0; i < spans.size(); ++i) {
          if (spans[i].second && i > 0 && spans[i - 1].second)
            pieces.back() = extend(pieces.back(), spans[i].first);
          else
            pieces.push_back(spans[i].first);
        }
        break;
      case SplitBehavior::kMergedWithPrevious:
        // A match right after a non-match joins it; any other match stands alone.
        for (size_t i = 0; i < spans.size(); ++i) {
          if (spans[i].second && i > 0 && !spans[i - 1].second)
            pieces.back() = extend(pieces.back(), spans[i].first);
          else
            pieces.push_back(spans[i].first);
        }
        break;
      case SplitBehavior::kMergedWithNext:
        // The mirror image: a match right before a non-match joins it.
        for (size_t i = spans.size(); i-- > 0;) {
          if (spans[i].second && i + 1 < spans.size() && !spans[i + 1].second)
            pieces.back() = std::string_view(spans[i].first.data(), spans[i].first.size() + pieces.back().size());
          else
            pieces.push_back(spans[i].first);
        }
        std::reverse(pieces.begin(), pieces.end());
        break;
    }
    for (std::string_view piece : pieces) merge_sentencepiece_word(piece, out);
    return;
  }
  merge_sentencepiece_word(normalized, out);
}

void BpeTokenizer::merge_sentencepiece_word(std::string_view normalized, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const int32_t id = find_id(normalized); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // One symbol per code point; a code point that is not a token becomes its UTF-8 bytes
  // as <0xXX> tokens (byte_fallback), else <unk> (consecutive ones fused if fuse_unk).
  std::vector<int32_t> symbols;
  bool last_was_unk = false;
  for (size_t pos = 0; pos < normalized.size();) {
    const size_t len = unicode::decode_utf8(normalized, pos).byte_len;
    const int32_t id = find_id(std::string_view(normalized).substr(pos, len));
    if (id >= 0) {
      symbols.push_back(id);
      last_was_unk = false;
    } else if (byte_fallback_) {
      for (size_t i = 0; i < len; ++i)
        symbols.push_back(byte_fallback_ids_[static_cast<unsigned char>(normalized[pos + i])]);
      last_was_unk = false;
    } else {
      if (unk_id_ < 0) {
        throw std::invalid_argument(
            "tokenizer: text has a character that is not in the vocabulary, and the "
            "tokenizer has neither byte_fallback nor an unk_token");
      }
      if (!(fuse_unk_ && last_was_unk)) symbols.push_back(unk_id_);
      last_was_unk = true;
    }
    pos += len;
  }
  merge_word(std::move(symbols), out);
}

void BpeTokenizer::encode_section(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (kind_ == Kind::kByteLevel)
    encode_byte_level(text, out);
  else
    encode_sentencepiece(text, at_start, out);
}

const BpeTokenizer::AddedToken* BpeTokenizer::added_token_at(std::string_view text, size_t pos) const {
  for (int32_t i : added_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& t = added_[i];
    if (text.compare(pos, t.content.size(), t.content) == 0) return &t;
  }
  return nullptr;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  // Added tokens first, as HF's AddedVocabulary finds them (aho-corasick, leftmost-longest,
  // non-overlapping); each section between the non-special ones is encoded on its own
  // (normalizer, pre-tokenizer, merges), and a special one stays inside its section.
  size_t section = 0;
  for (size_t pos = 0; pos < text.size() && !added_.empty();) {
    const AddedToken* t = added_token_at(text, pos);
    if (!t) {
      ++pos;
      continue;
    }
    if (!t->special) {
      if (pos > section) encode_section(text.substr(section, pos - section), section == 0, ids);
      ids.push_back(t->id);
      section = pos + t->content.size();
    }
    pos += t->content.size();
  }
  if (section < text.size() || text.empty()) encode_section(text.substr(section), section == 0, ids);
  return ids;
}

// ---------------------------------------------------------------------------------------
// Decoding

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    token(id);  // range check
    text += decoded_[id];
  }
  // SentencePiece-style: drop the one "▁" (now " ") the Prepend normalizer added, like the
  // HF decoder's Strip(" ", start=1) and llama.cpp's add_space_prefix handling.
  if (kind_ == Kind::kSentencePiece && !text.empty() && text.front() == ' ') {
    for (const NormalizerStep& step : normalizer_) {
      if (step.op == NormalizerStep::Op::kPrepend || step.op == NormalizerStep::Op::kPrependUnlessPresent) {
        text.erase(0, 1);
        break;
      }
    }
  }
  return text;
}

}  // namespace fsdpp::tokenizer
