// Llama 3's and Qwen2's pre-tokenizer: splits text into the pieces that byte-level BPE
// merges within, exactly as Hugging Face tokenizers' Split pre-tokenizer (Oniguruma,
// behavior "Isolated") does with tiktoken's cl100k_base pattern, which Llama 3 uses:
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Qwen2's pattern is the same with \p{N} (one digit per piece) for \p{N}{1,3}.
// Hand-written rather than a regex engine: std::regex knows neither \p{..} nor UTF-8.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fsdpp::tokenizer {

// The two patterns exactly as tokenizer.json files write them (Split.pattern.Regex);
// a loader compares a file's pattern with these as strings.
extern const std::string_view kLlama3SplitRegex;
extern const std::string_view kQwen2SplitRegex;

// Returns the consecutive pieces of `text` (views into it) in order; their concatenation is
// `text`. `max_digit_run` is 3 for Llama 3 (\p{N}{1,3}) and 1 for Qwen2 (\p{N}).
// Bytes that are not valid UTF-8 count as U+FFFD (a symbol, neither L, N nor \s).
std::vector<std::string_view> split_llama3_pieces(std::string_view text, size_t max_digit_run);

}  // namespace fsdpp::tokenizer
