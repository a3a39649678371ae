#include "core/tokenizer/gpt2_pretokenizer.h"

#include <cstdint>

#include "core/tokenizer/unicode.h"

namespace fsdpp::tokenizer {
namespace {

using unicode::CharClass;

// Length in code points of the contraction ('s 't 'm 'd 're 've 'll: lowercase ASCII only,
// as in the regex) starting at code point i, or 0 if there is none.
size_t contraction_len(const std::vector<uint32_t>& cps, size_t i) {
  if (cps[i] != '\'' || i + 1 >= cps.size()) return 0;
  const uint32_t a = cps[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= cps.size()) return 0;
  const uint32_t b = cps[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

std::vector<std::string_view> split_gpt2_pieces(std::string_view text) {
  const auto text_points = unicode::classify_text(text);
  const auto& cps = text_points.cps;
  const auto& cls = text_points.cls;
  const auto& byte_at = text_points.byte_at;
  const size_t n = cps.size();

  std::vector<std::string_view> pieces;
  size_t i = 0;
  auto emit_until = [&](size_t end) {
    pieces.push_back(text.substr(byte_at[i], byte_at[end] - byte_at[i]));
    i = end;
  };
  while (i < n) {
    // 's|'t|'re|'ve|'m|'ll|'d
    if (const size_t len = contraction_len(cps, i)) {
      emit_until(i + len);
      continue;
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional single U+0020, then a
    // maximal run of one class.
    const size_t body = (cps[i] == ' ' && i + 1 < n && cls[i + 1] != CharClass::kSpace) ? i + 1 : i;
    if (cls[body] != CharClass::kSpace) {
      size_t end = body + 1;
      while (end < n && cls[end] == cls[body]) ++end;
      emit_until(end);
      continue;
    }
    // A whitespace run [i, end). `\s+(?!\S)` takes all of it at the end of the text, and
    // all but its last code point before a non-space (that one then starts the next
    // piece, e.g. " world"); for a run of one before a non-space only `\s+` matches.
    size_t end = i;
    while (end < n && cls[end] == CharClass::kSpace) ++end;
    if (end < n && end - i > 1) --end;
    emit_until(end);
  }
  return pieces;
}

}  // namespace fsdpp::tokenizer
