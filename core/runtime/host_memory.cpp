#include "core/runtime/host_memory.h"

#include <malloc.h>

#include <climits>

// Built with ASan, malloc is the sanitizer's, not glibc's.
#if defined(__SANITIZE_ADDRESS__)
#define FSDPP_HEAP_IS_SANITIZERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FSDPP_HEAP_IS_SANITIZERS 1
#endif
#endif
#ifndef FSDPP_HEAP_IS_SANITIZERS
#define FSDPP_HEAP_IS_SANITIZERS 0
#endif

namespace fsdpp::runtime {

namespace {
bool kept = false;
}  // namespace

bool keep_freed_host_memory(std::size_t bytes) {
#if FSDPP_HEAP_IS_SANITIZERS
  (void)bytes;  // ASan's allocator serves malloc, and its mallopt() refuses every setting
  return false;
#endif
  const int value = bytes > static_cast<std::size_t>(INT_MAX) ? INT_MAX : static_cast<int>(bytes);
  // Setting either threshold also turns off glibc's dynamic mmap threshold, which would
  // otherwise move it back (and never above 32 MiB).
  const bool mmap_ok = ::mallopt(M_MMAP_THRESHOLD, value) == 1;
  const bool trim_ok = ::mallopt(M_TRIM_THRESHOLD, value) == 1;
  kept = mmap_ok && trim_ok;
  return kept;
}

const char* host_heap_policy() { return kept ? "kept" : FSDPP_HEAP_IS_SANITIZERS ? "sanitizer" : "glibc"; }

}  // namespace fsdpp::runtime
