// The Unicode facts the tokenizers need: UTF-8 code point boundaries and the three
// character classes of GPT-2's pre-tokenizer regex (\p{L}, \p{N}, \s).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpp::tokenizer::unicode {

// One decoded code point of a UTF-8 string: its value and its length in bytes. A byte
// that does not start a valid UTF-8 sequence decodes as itself (value 0xFFFD, 1 byte),
// so that every byte of the input belongs to exactly one code point.
struct CodePoint {
  uint32_t value;
  size_t byte_len;
};

// Decodes the code point that starts at byte `pos` of `text` (pos < text.size()).
CodePoint decode_utf8(std::string_view text, size_t pos);

// Appends the UTF-8 encoding of `cp` (<= 0x10FFFF) to `out`.
void append_utf8(uint32_t cp, std::string& out);

bool is_letter(uint32_t cp);      // general category L*  (regex \p{L})
bool is_number(uint32_t cp);      // general category N*  (regex \p{N})
bool is_whitespace(uint32_t cp);  // property White_Space (regex \s), 25 code points

// The class the pre-tokenizer regexes test a code point for, in that order: \s, \p{L}, \p{N}.
enum class CharClass { kLetter, kNumber, kSpace, kOther };
CharClass classify(uint32_t cp);

// `text` as code points, for the hand-written pre-tokenizers: each one's value, class and
// the byte where it starts, plus one offset past the end (byte_at has one more entry).
struct ClassifiedText {
  std::vector<uint32_t> cps;
  std::vector<CharClass> cls;
  std::vector<size_t> byte_at;
};
ClassifiedText classify_text(std::string_view text);

}  // namespace fsdpp::tokenizer::unicode
