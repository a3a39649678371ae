// The nesting limit of every JSON reader of untrusted bytes. nlohmann parses any depth,
// but copying, printing (an error message's dump()) or comparing the value recurses once
// per level, so a file of ~100,000 nested brackets overflows the stack. No real document
// (config.json, tokenizer.json, a checkpoint index, a results document) comes near it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

namespace fsdpp::io {

inline constexpr size_t kMaxJsonNestingDepth = 512;

// Deepest nesting of arrays and objects in JSON text; brackets inside strings do not count.
inline size_t json_nesting_depth(const std::string& text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// "" when `text` nests within the limit, else the reason, for the reader's own error.
inline std::string json_depth_problem(const std::string& text) {
  if (json_nesting_depth(text) <= kMaxJsonNestingDepth) return "";
  return "arrays and objects nested deeper than " + std::to_string(kMaxJsonNestingDepth) + " levels";
}

}  // namespace fsdpp::io
