#include "core/plan/caching_allocator.h"

namespace fsdpp::plan {

namespace {

constexpr int64_t kMinBlockSize = 512;
constexpr int64_t kSmallSize = 1 << 20;       // 1 MiB: small pool up to here
constexpr int64_t kMinLargeAlloc = 10 << 20;  // requests below this share a 20 MiB segment
constexpr int64_t kLargeBuffer = 20 << 20;
constexpr int64_t kRoundLarge = 2 << 20;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace

int64_t cuda_allocated_bytes(int64_t requested_bytes) {
  if (requested_bytes <= 0) return 0;
  const int64_t size = round_up(requested_bytes, kMinBlockSize);
  if (size <= kSmallSize) return size;  // small pool: always split off its 2 MiB segment
  const int64_t segment = size < kMinLargeAlloc ? kLargeBuffer : round_up(size, kRoundLarge);
  return segment - size > kSmallSize ? size : segment;
}

}  // namespace fsdpp::plan
