#include "core/data/sampler.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace fsdpp::data {

namespace {

// splitmix64 (Steele, Lea, Flood 2014; the seeding generator of xoshiro): a 64-bit
// generator fully defined by its state, so the order never depends on a library's RNG.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void require(bool ok, const std::string& field, int64_t value, const std::string& expected) {
  if (!ok) throw std::invalid_argument("sampler " + field + " " + std::to_string(value) + ": expected " + expected);
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  // One stream per (seed, epoch): the state starts at splitmix64(seed) + epoch, so
  // neighbouring seeds and epochs give unrelated streams.
  uint64_t seed_state = seed;
  uint64_t state = splitmix64(seed_state) + static_cast<uint64_t>(epoch);
  // Fisher-Yates from the back; j = floor(r * (i + 1) / 2^64) (Lemire's multiply-shift:
  // no division, bias below (i + 1) / 2^64).
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t r = splitmix64(state);
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

DistributedSampler::DistributedSampler(const SamplerOptions& options) : options_(options) {
  require(options.num_windows >= 1, "num_windows", options.num_windows, ">= 1 (the dataset holds no window)");
  require(options.batch_per_rank >= 1, "batch_per_rank", options.batch_per_rank, ">= 1");
  require(options.world_size >= 1, "world_size", options.world_size, ">= 1");
  require(options.rank >= 0 && options.rank < options.world_size, "rank", options.rank,
          "in [0, world_size = " + std::to_string(options.world_size) + ")");
  require(options.grad_accum >= 1, "grad_accum", options.grad_accum, ">= 1");
}

int64_t DistributedSampler::global_batch() const {
  return options_.batch_per_rank * options_.world_size * options_.grad_accum;
}

int64_t DistributedSampler::epoch() const { return position_ / options_.num_windows; }

void DistributedSampler::set_position(int64_t position) {
  require(position >= 0, "position", position, ">= 0");
  position_ = position;
}

const std::vector<int64_t>& DistributedSampler::permutation(int64_t epoch) const {
  // Two slots: a step that crosses an epoch boundary alternates between two epochs.
  const int slot = static_cast<int>(epoch & 1);
  if (cached_epoch_[slot] != epoch) {
    cached_perm_[slot] = epoch_permutation(options_.num_windows, options_.seed, epoch);
    cached_epoch_[slot] = epoch;
  }
  return cached_perm_[slot];
}

int64_t DistributedSampler::window_at(int64_t position) const {
  require(position >= 0, "position", position, ">= 0");
  const int64_t w = options_.num_windows;
  if (!options_.shuffle) return position % w;
  return permutation(position / w)[static_cast<size_t>(position % w)];
}

std::vector<int64_t> DistributedSampler::micro_batch(int micro) const {
  require(micro >= 0 && micro < options_.grad_accum, "micro", micro,
          "in [0, grad_accum = " + std::to_string(options_.grad_accum) + ")");
  const int64_t b = options_.batch_per_rank;
  const int64_t first = position_ + (static_cast<int64_t>(micro) * options_.world_size + options_.rank) * b;
  std::vector<int64_t> out(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) out[static_cast<size_t>(i)] = window_at(first + i);
  return out;
}

std::vector<int64_t> DistributedSampler::global_batch_windows() const {
  std::vector<int64_t> out(static_cast<size_t>(global_batch()));
  for (int64_t j = 0; j < global_batch(); ++j) out[static_cast<size_t>(j)] = window_at(position_ + j);
  return out;
}

void DistributedSampler::advance() { position_ += global_batch(); }

}  // namespace fsdpp::data
