#include "core/tokenizer/falcon_pretokenizer.h"

#include <algorithm>
#include <cstdint>

#include "core/tokenizer/gpt2_pretokenizer.h"
#include "core/tokenizer/hf_punctuation_ranges.h"
#include "core/tokenizer/unicode.h"

namespace fsdpp::tokenizer {
namespace {

// HF tokenizers' is_punc: Rust's char::is_ascii_punctuation (all 32 ASCII symbols,
// $+<=>^`|~ included) or the unicode_categories crate's P* (hf_punctuation_ranges.h).
bool is_punctuation(uint32_t cp) {
  const unicode::CodePointRange* begin = unicode::kHfPunctuationRanges;
  const unicode::CodePointRange* end = begin + unicode::kHfPunctuationRangesCount;
  const unicode::CodePointRange* it =
      std::lower_bound(begin, end, cp, [](const unicode::CodePointRange& r, uint32_t v) { return r.last < v; });
  return it != end && it->first <= cp;
}

// Rust's char::is_numeric (categories Nd Nl No) of the byte's bytes_to_unicode character.
bool is_numeric_byte(unsigned char b) {
  return (b >= '0' && b <= '9') || b == 0xB2 || b == 0xB3 || b == 0xB9 || b == 0xBC || b == 0xBD || b == 0xBE;
}

bool is_ascii_digit(unsigned char b) { return b >= '0' && b <= '9'; }

// Split "[0-9][0-9][0-9]", behavior Isolated: each leftmost triple is a piece, and so is
// each stretch between them.
void split_digit_triples(std::string_view piece, std::vector<std::string_view>& out) {
  size_t start = 0;
  for (size_t p = 0; p + 3 <= piece.size();) {
    if (is_ascii_digit(piece[p]) && is_ascii_digit(piece[p + 1]) && is_ascii_digit(piece[p + 2])) {
      if (p > start) out.push_back(piece.substr(start, p - start));
      out.push_back(piece.substr(p, 3));
      p += 3;
      start = p;
    } else {
      ++p;
    }
  }
  if (start < piece.size()) out.push_back(piece.substr(start));
}

}  // namespace

std::vector<std::string_view> split_falcon_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  // 1. Punctuation, Contiguous: maximal runs of punctuation and of everything else.
  std::vector<std::string_view> runs;
  size_t run_start = 0;
  bool run_is_punct = false;
  for (size_t pos = 0; pos < text.size();) {
    const unicode::CodePoint cp = unicode::decode_utf8(text, pos);
    const bool punct = is_punctuation(cp.value);
    if (pos > 0 && punct != run_is_punct) {
      runs.push_back(text.substr(run_start, pos - run_start));
      run_start = pos;
    }
    run_is_punct = punct;
    pos += cp.byte_len;
  }
  if (run_start < text.size()) runs.push_back(text.substr(run_start));
  for (std::string_view run : runs) {
    // 2. ByteLevel: GPT-2's regex in each run.
    for (std::string_view gpt2_piece : split_gpt2_pieces(run)) {
      // 3. Digits, Contiguous: maximal runs of numeric and of other bytes.
      size_t start = 0;
      for (size_t i = 1; i <= gpt2_piece.size(); ++i) {
        if (i == gpt2_piece.size() || is_numeric_byte(gpt2_piece[i]) != is_numeric_byte(gpt2_piece[i - 1])) {
          // 4. Split "[0-9][0-9][0-9]" in each.
          split_digit_triples(gpt2_piece.substr(start, i - start), pieces);
          start = i;
        }
      }
    }
  }
  return pieces;
}

}  // namespace fsdpp::tokenizer
