#include "core/tokenizer/llama3_pretokenizer.h"

#include <cstdint>

#include "core/tokenizer/unicode.h"

namespace fsdpp::tokenizer {

const std::string_view kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string_view kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using unicode::CharClass;

bool is_cr_or_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// `cp` equals the ASCII lowercase letter `lower` under Oniguruma's Unicode case folding,
// which (?i) applies: the letter, its uppercase, and for "s" also U+017F (LATIN SMALL
// LETTER LONG S, which folds to "s"). No other code point folds to one of s t r e v m l d
// (checked against tokenizers over every letter).
bool folds_to(uint32_t cp, char lower) {
  return cp == static_cast<uint32_t>(lower) || cp == static_cast<uint32_t>(lower - 'a' + 'A') ||
         (lower == 's' && cp == 0x17F);
}

// Length in code points of the contraction (?i:'s|'t|'re|'ve|'m|'ll|'d) at code point i,
// or 0 if there is none.
size_t folded_contraction_len(const std::vector<uint32_t>& cps, size_t i) {
  if (cps[i] != '\'' || i + 1 >= cps.size()) return 0;
  const uint32_t a = cps[i + 1];
  if (folds_to(a, 's') || folds_to(a, 't') || folds_to(a, 'm') || folds_to(a, 'd')) return 2;
  if (i + 2 >= cps.size()) return 0;
  const uint32_t b = cps[i + 2];
  if ((folds_to(a, 'r') && folds_to(b, 'e')) || (folds_to(a, 'v') && folds_to(b, 'e')) ||
      (folds_to(a, 'l') && folds_to(b, 'l')))
    return 3;
  return 0;
}

}  // namespace

std::vector<std::string_view> split_llama3_pieces(std::string_view text, size_t max_digit_run) {
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
  auto run_end = [&](size_t from, CharClass c) {
    while (from < n && cls[from] == c) ++from;
    return from;
  };
  while (i < n) {
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (const size_t len = folded_contraction_len(cps, i)) {
      emit_until(i + len);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+: a run of letters, led by at most one code point that is
    // neither \r, \n, a letter nor a number (a space, a tab, punctuation: " world", "!x").
    if (cls[i] == CharClass::kLetter) {
      emit_until(run_end(i, CharClass::kLetter));
      continue;
    }
    if (cls[i] != CharClass::kNumber && !is_cr_or_lf(cps[i]) && i + 1 < n && cls[i + 1] == CharClass::kLetter) {
      emit_until(run_end(i + 1, CharClass::kLetter));
      continue;
    }
    // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2): numbers in runs of at most max_digit_run.
    if (cls[i] == CharClass::kNumber) {
      size_t end = i + 1;
      while (end < n && end - i < max_digit_run && cls[end] == CharClass::kNumber) ++end;
      emit_until(end);
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*: an optional single U+0020, a run of other symbols, then
    // any \r and \n that follow them.
    const size_t body = (cps[i] == ' ' && i + 1 < n && cls[i + 1] == CharClass::kOther) ? i + 1 : i;
    if (cls[body] == CharClass::kOther) {
      size_t end = run_end(body, CharClass::kOther);
      while (end < n && is_cr_or_lf(cps[end])) ++end;
      emit_until(end);
      continue;
    }
    // Here cps[i] is whitespace; the whitespace run is [i, end).
    const size_t end = run_end(i, CharClass::kSpace);
    // \s*[\r\n]+: the greedy \s* backs off to the run's last \r or \n, which [\r\n]+ takes.
    size_t last_newline = end;
    for (size_t k = end; k > i; --k) {
      if (is_cr_or_lf(cps[k - 1])) {
        last_newline = k - 1;
        break;
      }
    }
    if (last_newline < end) {
      emit_until(last_newline + 1);
      continue;
    }
    // \s+(?!\S) takes all of the run at the end of the text, and all but its last code
    // point before a non-space (that one then leads the next piece, e.g. " world"); a run
    // of one before a non-space is left to \s+.
    emit_until(end < n && end - i > 1 ? end - 1 : end);
  }
  return pieces;
}

}  // namespace fsdpp::tokenizer
