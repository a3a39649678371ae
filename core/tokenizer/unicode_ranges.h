// Tables of the Unicode general categories L and N (generated: unicode_ranges.cpp by
// gen_unicode_ranges.py). Internal to the tokenizer; use unicode.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdpp::tokenizer::unicode {

// Inclusive range [first, last] of code points, sorted ascending and disjoint in each table.
struct CodePointRange {
  uint32_t first;
  uint32_t last;
};

extern const CodePointRange kLetterRanges[];  // categories Lu Ll Lt Lm Lo
extern const size_t kLetterRangesCount;
extern const CodePointRange kNumberRanges[];  // categories Nd Nl No
extern const size_t kNumberRangesCount;

}  // namespace fsdpp::tokenizer::unicode
