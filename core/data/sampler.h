// Which windows each rank trains on at each step: a deterministic, resumable order over
// the dataset's windows, shared by all ranks, like torch's DistributedSampler but
// addressed by a global position so that a resume (even with another world size)
// continues exactly where training stopped.
//
// The order: a stream of positions p = 0, 1, 2, ...; position p lies in epoch
// e = p / num_windows and names window perm_e[p % num_windows], where perm_e is the
// identity with `shuffle` off (the documented --no-shuffle order) and otherwise a
// permutation derived only from (seed, e) (Fisher-Yates driven by splitmix64; no
// dependence on LibTorch's RNG). Every window is used exactly once per epoch.
//
// A step consumes G = batch_per_rank * world_size * grad_accum consecutive positions,
// starting at the sampler's position. Within the step, position offset
// j = (micro * world_size + rank) * batch_per_rank + b is row b of micro-step `micro` on
// `rank`: each micro-step takes a contiguous block of world_size * batch_per_rank
// positions, split across ranks in rank order.
#pragma once

#include <cstdint>
#include <vector>

namespace fsdpp::data {

struct SamplerOptions {
  int64_t num_windows = 0;
  int64_t batch_per_rank = 1;
  int world_size = 1;
  int rank = 0;
  int grad_accum = 1;
  bool shuffle = true;
  uint64_t seed = 0;
};

class DistributedSampler {
 public:
  // Throws std::invalid_argument naming the field for num_windows < 1, batch_per_rank < 1,
  // world_size < 1, rank outside [0, world_size) or grad_accum < 1.
  explicit DistributedSampler(const SamplerOptions& options);

  int64_t global_batch() const;                   // G
  int64_t position() const { return position_; }  // positions consumed so far
  int64_t epoch() const;                          // epoch of the next position
  // Resume: the next step starts at this position (what a checkpoint stores).
  void set_position(int64_t position);

  // Window indices of this rank's micro-step `micro` of the step that starts at the
  // current position (batch_per_rank of them, in row order).
  std::vector<int64_t> micro_batch(int micro) const;
  // All G windows of the current step in position order (every rank's, every micro-step).
  std::vector<int64_t> global_batch_windows() const;
  // Advances the position by G (call once per optimizer step).
  void advance();

  // The window at a position of the stream.
  int64_t window_at(int64_t position) const;

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;

  SamplerOptions options_;
  int64_t position_ = 0;
  mutable int64_t cached_epoch_[2] = {-1, -1};
  mutable std::vector<int64_t> cached_perm_[2];
};

// The permutation of [0, n) for (seed, epoch) described above.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace fsdpp::data
