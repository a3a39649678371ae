// Byte-pair-encoding tokenizers, bit-exact with the references they are tested against
// (llama.cpp's ggml-vocab-{gpt-2,llama-spm,llama-bpe,qwen2,phi-3,falcon} vectors and HF
// tokenizers; see README.md here):
//
//  - byte-level BPE (GPT-2, Llama 3, Qwen2, Falcon): text -> [NFC, Qwen2's Hub file] ->
//    GPT-2's, Llama 3's, Qwen2's or Falcon's pre-tokenizer pieces -> bytes -> one symbol
//    per byte (GPT-2's bytes_to_unicode alphabet) -> merges by rank (with ignore_merges,
//    Llama 3: a piece that is a token stays whole). Lossless on any bytes whose symbols
//    the vocabulary has (all but Falcon's: every byte), with NFC on NFC text.
//  - SentencePiece-style BPE (Llama-2): text -> normalizer (prepend "▁", " " -> "▁") -> one
//    symbol per code point, unknown ones as <0xXX> byte tokens (byte_fallback) -> merges,
//    by merge rank (tokenizer.json) or by the merged token's score (SentencePiece's own
//    rule, as llama.cpp applies it to a GGUF vocabulary). No regex pre-tokenization.
//
// encode() never adds BOS/EOS and never parses special-token text such as "<s>": it is
// plain text (llama.cpp's tokenize with add_special = parse_special = false). A
// tokenizer.json's added tokens that are not special (SentencePiece's user-defined pieces:
// Gemma's "<start_of_turn>", newline runs, ...) are found in the text first, as Hugging Face
// finds them (leftmost, longest), and the text between them is encoded section by section.
// A loaded tokenizer is immutable; const calls are safe from many threads at once.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fsdpp::tokenizer {

class BpeTokenizer {
 public:
  enum class Kind { kByteLevel, kSentencePiece };

  // GPT-2's own files: vocab.json / encoder.json (token -> id) and merges.txt / vocab.bpe
  // (one "left right" merge per line, highest priority first, "#version" line ignored).
  // Throws std::runtime_error if a file cannot be read, std::invalid_argument naming the
  // file and the expectation if its content is malformed.
  static BpeTokenizer from_gpt2_files(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);

  // A Hugging Face tokenizer.json whose model.type is "BPE". Byte-level when its
  // pre_tokenizer is ByteLevel, or a Sequence of a Split by Llama 3's or Qwen2's regex
  // (exactly those patterns) and a ByteLevel, or Falcon's Sequence (Punctuation,
  // ByteLevel, Digits, Split); its normalizer null or NFC.
  // SentencePiece-style when it has no pre_tokenizer (the normalizer may be Prepend /
  // Replace / a Sequence of them), a Metaspace one (what tokenizers >= 0.14 and
  // transformers 5 write: " " -> "▁", then a "▁" prefix unless the text already starts
  // with one, "first": only on the section that starts the text; split into "▁"-led words
  // when its `split` is true) or a Split by a String pattern (Gemma's: " ",
  // MergedWithPrevious). Added tokens: special ones are plain text; the others must have
  // normalized, lstrip, rstrip and single_word false. Throws as above; any configuration
  // outside these (another model type, dropout, subword prefixes, other pre-tokenizers,
  // Split patterns or normalizers) is std::invalid_argument naming the field.
  static BpeTokenizer from_hf_tokenizer_json(const std::filesystem::path& tokenizer_json);

  // The vocabulary of a GGUF file (llama.cpp's format; see gguf_vocab.h) whose
  // tokenizer.ggml.model is "llama" (SentencePiece: tokens + scores + token types, merged
  // by score like llama.cpp's llm_tokenizer_spm) or "gpt2" (tokens + merges, byte-level,
  // with the pre-tokenizer tokenizer.ggml.pre names: "gpt-2", "llama-bpe", "qwen2" or
  // "falcon"; any other is std::invalid_argument naming the file and the value).
  // Control tokens (<s>, </s>) decode to nothing. Throws as above.
  static BpeTokenizer from_gguf_vocab(const std::filesystem::path& gguf);

  // Token ids of `text` (UTF-8; invalid bytes are encoded too, byte-level losslessly).
  // Throws std::invalid_argument for a byte whose byte-level symbol the vocabulary lacks
  // (Falcon's lacks 28; Hugging Face drops such a byte) and, SentencePiece-style, for a
  // character with neither a token, byte fallback nor an unk_token.
  std::vector<int32_t> encode(std::string_view text) const;

  // The bytes the ids stand for; special tokens (<s>, </s>, <|endoftext|>...) decode to
  // nothing. decode(encode(t)) == t for every t (SentencePiece: drops the prepended "▁").
  // Throws std::out_of_range for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  Kind kind() const { return kind_; }
  size_t vocab_size() const { return tokens_.size(); }
  // The vocabulary entry of `id` as written in the files (e.g. "Ġthe", "▁the", "<0x0A>").
  const std::string& token(int32_t id) const;
  // The id of a vocabulary entry spelled exactly `token` (e.g. "<|endoftext|>"), if any.
  std::optional<int32_t> token_id(std::string_view token) const;

 private:
  // One normalizer step of a SentencePiece-style tokenizer, applied in order.
  struct NormalizerStep {
    // kPrependUnlessPresent: HF Metaspace's prefix, added unless the text already starts
    // with it (so decode(encode(" x")) is "x", as in Hugging Face).
    enum class Op { kPrepend, kPrependUnlessPresent, kReplace } op;
    std::string from;         // kReplace only
    std::string to;           // the prepended / replacing text
    bool first_only = false;  // kPrependUnlessPresent: Metaspace "first", only the section at offset 0
  };
  // A tokenizer.json added token matched in the raw text (normalized false).
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special;  // found, then left as plain text (it shadows what it covers, as in HF)
  };
  // HF Split pre-tokenizer behaviours (SplitDelimiterBehavior).
  enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Merge {
    int32_t rank;       // lower merges first
    int32_t merged_id;  // id of left+right
  };

  BpeTokenizer() = default;
  static BpeTokenizer from_hf_json_value(const nlohmann::json& root, const std::string& source);

  void add_vocab_entry(const std::string& token, int64_t id, const std::string& source);
  void add_merge(std::string_view left, std::string_view right, const std::string& source);
  void finish_byte_level(const std::string& source);
  void finish_sentencepiece(const std::string& source);
  int32_t find_id(std::string_view token) const;  // -1 if absent

  // The merge of adjacent symbols (left, right), if any: by rank, or by score.
  bool find_merge(int32_t left, int32_t right, Merge& merge) const;
  // Applies the merges to one word given as its initial symbol ids; appends the result.
  void merge_word(std::vector<int32_t> symbols, std::vector<int32_t>& out) const;
  void encode_byte_level(std::string_view text, std::vector<int32_t>& out) const;
  // One section of text between added tokens; at_start: it begins the text.
  void encode_section(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_sentencepiece(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  // The longest added token at text[pos], or nullptr.
  const AddedToken* added_token_at(std::string_view text, size_t pos) const;
  static void add_added_tokens(BpeTokenizer& tok, const nlohmann::json& added, const std::string& source);
  static void add_split(BpeTokenizer& tok, const nlohmann::json& pre, const std::string& source);
  void merge_sentencepiece_word(std::string_view normalized, std::vector<int32_t>& out) const;
  static void add_metaspace(BpeTokenizer& tok, const nlohmann::json& pre, const std::string& source);

  Kind kind_ = Kind::kByteLevel;
  std::vector<std::string> tokens_;               // id -> vocabulary entry
  std::unordered_map<std::string, int32_t> ids_;  // vocabulary entry -> id
  std::unordered_map<uint64_t, Merge> merges_;    // (left id << 32 | right id) -> merge
  std::vector<std::string> decoded_;              // id -> the bytes it decodes to
  // SentencePiece scores: id -> rank of its score among all scores (higher score = lower
  // rank, equal scores = equal rank, so ties go to the leftmost pair). Empty: use merges_.
  std::vector<int32_t> score_rank_;
  bool ignore_merges_ = false;  // HF: a word that is itself a token skips merging

  // Byte-level.
  std::array<int32_t, 256> byte_symbol_ids_{};  // byte -> id of its bytes_to_unicode char
  bool add_prefix_space_ = false;               // HF ByteLevel: prepend " " unless present
  // How the text is split before merging: not at all (HF ByteLevel use_regex false alone),
  // GPT-2's regex (gpt2_pretokenizer.h), Llama 3's or Qwen2's (llama3_pretokenizer.h),
  // Falcon's (falcon_pretokenizer.h).
  enum class PreTokenizer { kNone, kGpt2, kLlama3, kQwen2, kFalcon };
  PreTokenizer pre_tokenizer_ = PreTokenizer::kGpt2;
  bool nfc_ = false;  // HF normalizer NFC (Qwen2): the text is NFC-normalized first
  static void set_byte_level_pre_tokenizer(BpeTokenizer& tok, const nlohmann::json& pre, const std::string& source);

  // SentencePiece-style.
  std::vector<NormalizerStep> normalizer_;
  bool byte_fallback_ = false;
  std::array<int32_t, 256> byte_fallback_ids_{};  // byte -> id of "<0xXX>", -1 if absent
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  std::string split_before_;   // HF Metaspace split: merge each word that starts with it alone
  std::string split_pattern_;  // HF Split by a String pattern (Gemma's " "), after the normalizer
  SplitBehavior split_behavior_ = SplitBehavior::kIsolated;

  // Added tokens found in the raw text before anything else (tokenizer.json only), indexed
  // by their first byte, longest first.
  std::vector<AddedToken> added_;
  std::array<std::vector<int32_t>, 256> added_by_first_byte_{};
};

}  // namespace fsdpp::tokenizer
