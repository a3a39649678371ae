// The code points Hugging Face tokenizers' Punctuation pre-tokenizer splits at (generated:
// hf_punctuation_ranges.cpp by gen_hf_punctuation.py). Internal to the tokenizer; used by
// falcon_pretokenizer.cpp.
#pragma once

#include <cstddef>

#include "core/tokenizer/unicode_ranges.h"

namespace fsdpp::tokenizer::unicode {

// ASCII punctuation ($+<=>^`|~ included) and the unicode_categories crate's P* (an old
// Unicode, 8.0); sorted, disjoint.
extern const CodePointRange kHfPunctuationRanges[];
extern const size_t kHfPunctuationRangesCount;

}  // namespace fsdpp::tokenizer::unicode
