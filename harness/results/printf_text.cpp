#include "harness/results/printf_text.h"

#include <cstdarg>
#include <cstdio>

namespace fsdpp::results {

std::string printf_text(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  va_list again;
  va_copy(again, args);
  const int length = std::vsnprintf(nullptr, 0, pattern, args);
  va_end(args);
  std::string out(length > 0 ? static_cast<size_t>(length) : 0, '\0');
  if (length > 0) std::vsnprintf(out.data(), out.size() + 1, pattern, again);
  va_end(again);
  return out;
}

}  // namespace fsdpp::results
