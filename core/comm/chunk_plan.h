// How a flat tensor of `numel` elements is cut into one chunk per rank: chunks of
// ceil(numel/parts), the tail ones short or empty. The Gloo backend's all-reduce and
// broadcast move these chunks (gloo_backend.cpp); the NCCL backend tallies its bytes by the
// same plan (nccl_backend.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace fsdpp::comm {

// Element range [begin, end) of chunk j when `numel` is cut into `parts` chunks of
// ceil(numel/parts): the tail chunks may be short or empty.
inline std::pair<int64_t, int64_t> chunk_range(int64_t numel, int parts, int j) {
  int64_t chunk = (numel + parts - 1) / parts;
  int64_t begin = std::min<int64_t>(numel, chunk * j);
  int64_t end = std::min<int64_t>(numel, begin + chunk);
  return {begin, end};
}

// Bytes of each of the `parts` chunks (chunk_range) of a flat tensor.
inline std::vector<int64_t> chunk_byte_counts(int64_t numel, int parts, int64_t element_size) {
  std::vector<int64_t> counts(parts);
  for (int j = 0; j < parts; ++j) {
    auto [b, e] = chunk_range(numel, parts, j);
    counts[j] = (e - b) * element_size;
  }
  return counts;
}

}  // namespace fsdpp::comm
