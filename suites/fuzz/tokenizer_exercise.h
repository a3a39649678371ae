// What the tokenizer fuzz targets do with a vocabulary the loader accepted: encode and
// decode a fixed text, as `fsdpp data prepare` and `fsdpp generate` would.
#pragma once

#include <string_view>

#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/load.h"

namespace fsdpp::fuzz {

// ASCII words and punctuation, GPT-2's contractions, digits, runs of spaces, a tab and a
// newline, 2-, 3- and 4-byte UTF-8, "<s>" as plain text, and an invalid byte (0xFF).
inline constexpr std::string_view kSampleText =
    "Hello, world! It's 2026; they'll   go\t(x=3.14)\n caf\xC3\xA9 "
    "\xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x99\x82 <s> \xFF end";

inline void exercise_tokenizer(const tokenizer::BpeTokenizer& tok) {
  for (std::string_view text : {kSampleText, std::string_view(" "), std::string_view()}) {
    const auto ids = tok.encode(text);
    (void)tok.decode(ids);
  }
  (void)tokenizer::document_separator_id(tok);
}

}  // namespace fsdpp::fuzz
