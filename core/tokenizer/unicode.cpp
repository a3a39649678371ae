#include "core/tokenizer/unicode.h"

#include <algorithm>

#include "core/tokenizer/unicode_ranges.h"

namespace fsdpp::tokenizer::unicode {
namespace {

bool in_ranges(uint32_t cp, const CodePointRange* ranges, size_t count) {
  // First range whose last >= cp; cp is inside iff that range also starts at or before it.
  const CodePointRange* end = ranges + count;
  const CodePointRange* it =
      std::lower_bound(ranges, end, cp, [](const CodePointRange& r, uint32_t v) { return r.last < v; });
  return it != end && it->first <= cp;
}

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

CodePoint decode_utf8(std::string_view text, size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  size_t len = 0;
  uint32_t cp = 0;
  if (b0 < 0x80) return {b0, 1};
  if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else
    return {0xFFFD, 1};
  if (pos + len > text.size()) return {0xFFFD, 1};
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(text[pos + i]);
    if (!is_continuation(b)) return {0xFFFD, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong encodings, surrogates and values past U+10FFFF are not valid UTF-8.
  static constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLen[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0xFFFD, 1};
  return {cp, len};
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_letter(uint32_t cp) { return in_ranges(cp, kLetterRanges, kLetterRangesCount); }

bool is_number(uint32_t cp) { return in_ranges(cp, kNumberRanges, kNumberRangesCount); }

bool is_whitespace(uint32_t cp) {
  // Unicode's White_Space property (PropList.txt), which is what \s matches in the
  // `regex` module GPT-2 used and in llama.cpp's unicode_set_whitespace.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

CharClass classify(uint32_t cp) {
  if (is_whitespace(cp)) return CharClass::kSpace;
  if (is_letter(cp)) return CharClass::kLetter;
  if (is_number(cp)) return CharClass::kNumber;
  return CharClass::kOther;
}

ClassifiedText classify_text(std::string_view text) {
  ClassifiedText out;
  for (size_t pos = 0; pos < text.size();) {
    const CodePoint cp = decode_utf8(text, pos);
    out.cps.push_back(cp.value);
    out.cls.push_back(classify(cp.value));
    out.byte_at.push_back(pos);
    pos += cp.byte_len;
  }
  out.byte_at.push_back(text.size());
  return out;
}

}  // namespace fsdpp::tokenizer::unicode
