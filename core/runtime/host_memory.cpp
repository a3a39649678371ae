#include "core/runtime/host_memory.h"

#include <malloc.h>

#include <climits>

namespace fsdpp::runtime {

namespace {
bool kept = false;
}  // namespace

bool keep_freed_host_memory(std::size_t bytes) {
  const int value = bytes > static_cast<std::size_t>(INT_MAX) ? INT_MAX : static_cast<int>(bytes);
  // Setting either threshold also turns off glibc's dynamic mmap threshold, which would
  // otherwise move it back (and never above 32 MiB).
  const bool mmap_ok = ::mallopt(M_MMAP_THRESHOLD, value) == 1;
  const bool trim_ok = ::mallopt(M_TRIM_THRESHOLD, value) == 1;
  kept = mmap_ok && trim_ok;
  return kept;
}

const char* host_heap_policy() { return kept ? "kept" : "glibc"; }

}  // namespace fsdpp::runtime
