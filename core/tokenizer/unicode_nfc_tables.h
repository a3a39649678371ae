// Tables of Unicode canonical decomposition, combining classes and composition for NFC
// (generated: unicode_nfc_tables.cpp by gen_unicode_nfc.py). Internal to the tokenizer;
// use nfc.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdpp::tokenizer::unicode {

// The canonical decomposition mapping of `cp` (one level): `first`, then `second` if it is
// non-zero. Sorted by cp. Hangul syllables are decomposed arithmetically, not listed.
struct CanonicalDecomposition {
  uint32_t cp;
  uint32_t first;
  uint32_t second;
};
// The Canonical_Combining_Class of the code points [first, last]; sorted, disjoint; code
// points in no run have class 0.
struct CombiningClassRun {
  uint32_t first;
  uint32_t last;
  uint8_t combining_class;
};
// `first` followed by `second` composes to `composite` (primary composites only). Sorted
// by (first, second).
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

extern const CanonicalDecomposition kCanonicalDecompositions[];
extern const size_t kCanonicalDecompositionsCount;
extern const CombiningClassRun kCombiningClasses[];
extern const size_t kCombiningClassesCount;
extern const Composition kCompositions[];
extern const size_t kCompositionsCount;

}  // namespace fsdpp::tokenizer::unicode
