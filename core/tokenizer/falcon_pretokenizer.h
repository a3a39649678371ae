// Falcon's pre-tokenizer: splits text into the pieces that byte-level BPE merges within,
// exactly as the Hugging Face tokenizers Sequence of Falcon's tokenizer.json does:
//
//   Punctuation (behavior "Contiguous")  runs of punctuation apart from the rest
//   ByteLevel (use_regex true)           GPT-2's regex in each piece; bytes -> characters
//   Digits (individual_digits false)     runs of numeric characters apart from the rest
//   Split "[0-9][0-9][0-9]" (Isolated)   ASCII digit triples apart
//
// Digits runs after ByteLevel, on the characters that bytes_to_unicode gives each byte,
// so a byte counts as numeric when its character does: 0x30-0x39, and 0xB2 0xB3 0xB9 0xBC
// 0xBD 0xBE (which stand for ² ³ ¹ ¼ ½ ¾), also as a continuation byte of another
// character. llama.cpp's "falcon" pre-tokenizer approximates this Sequence with three
// regexes; fsdpp follows Hugging Face's.
#pragma once

#include <string_view>
#include <vector>

namespace fsdpp::tokenizer {

// Returns the consecutive pieces of `text` (views into it) in order; their concatenation is
// `text`. Bytes that are not valid UTF-8 count as U+FFFD (a symbol, not punctuation).
// Punctuation is what tokenizers 0.23 calls punctuation (hf_punctuation_ranges.h: an old
// Unicode's P*, not unicode_ranges' 14.0).
std::vector<std::string_view> split_falcon_pieces(std::string_view text);

}  // namespace fsdpp::tokenizer
