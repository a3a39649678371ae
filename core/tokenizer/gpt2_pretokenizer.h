// GPT-2's pre-tokenizer: splits text into the pieces that byte-level BPE merges within,
// exactly as OpenAI's encoder.py regex (Python `regex` module semantics) does:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Hand-written rather than a regex engine: std::regex knows neither \p{..} nor UTF-8.
#pragma once

#include <string_view>
#include <vector>

namespace fsdpp::tokenizer {

// Returns the consecutive pieces of `text` (views into it) in order; their concatenation is
// `text`. Bytes that are not valid UTF-8 count as U+FFFD (a symbol, neither L, N nor \s).
std::vector<std::string_view> split_gpt2_pieces(std::string_view text);

}  // namespace fsdpp::tokenizer
