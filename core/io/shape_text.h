// How error messages print a tensor shape.
#pragma once

#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string>

namespace fsdpp::io {

// "[768, 2304]"; "[]" for a scalar.
inline std::string shape_text(c10::IntArrayRef shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace fsdpp::io
