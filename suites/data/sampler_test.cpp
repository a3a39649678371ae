// DistributedSampler: the documented --no-shuffle order, every window once per epoch
// across all ranks and micro-steps, a deterministic shuffle, exact resumption (also with
// another world size and the same global batch), disjoint rank batches, and named errors.
#include "core/data/sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace fsdpp::data {
namespace {

using ::testing::HasSubstr;

struct Shape {
  int64_t windows, batch_per_rank;
  int world_size, grad_accum;
};

SamplerOptions options_for(const Shape& s, int rank, bool shuffle, uint64_t seed = 0) {
  SamplerOptions o;
  o.num_windows = s.windows;
  o.batch_per_rank = s.batch_per_rank;
  o.world_size = s.world_size;
  o.rank = rank;
  o.grad_accum = s.grad_accum;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

// What every rank is handed over `steps` steps: windows keyed by global position, with
// the position computed from the documented layout (s*G + (m*N + r)*B + b).
std::map<int64_t, int64_t> run_all_ranks(const Shape& s, bool shuffle, uint64_t seed, int64_t steps) {
  std::map<int64_t, int64_t> by_position;
  for (int r = 0; r < s.world_size; ++r) {
    DistributedSampler sampler(options_for(s, r, shuffle, seed));
    const int64_t g = sampler.global_batch();
    for (int64_t step = 0; step < steps; ++step, sampler.advance())
      for (int m = 0; m < s.grad_accum; ++m) {
        const auto rows = sampler.micro_batch(m);
        for (int64_t b = 0; b < s.batch_per_rank; ++b)
          by_position[step * g + (m * s.world_size + r) * s.batch_per_rank + b] = rows[static_cast<size_t>(b)];
      }
  }
  return by_position;
}

// Every epoch whose positions all appear uses each window exactly once.
void expect_each_window_once_per_complete_epoch(const Shape& s, const std::map<int64_t, int64_t>& by_position) {
  const int64_t total = static_cast<int64_t>(by_position.size());
  for (int64_t e = 0; (e + 1) * s.windows <= total; ++e) {
    std::vector<int64_t> seen;
    for (int64_t p = e * s.windows; p < (e + 1) * s.windows; ++p) seen.push_back(by_position.at(p));
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(static_cast<size_t>(s.windows));
    std::iota(all.begin(), all.end(), 0);
    ASSERT_EQ(seen, all) << "epoch " << e << " of W=" << s.windows;
  }
}

const std::vector<Shape> kShapes = {
    {12, 2, 3, 2},  {10, 1, 2, 2}, {7, 2, 2, 1},  {5, 3, 2, 2},  // W = G, W % G != 0, G > W
    {100, 4, 1, 3}, {1, 1, 1, 1},  {33, 2, 4, 1},
};

TEST(DistributedSampler, NoShuffleStepSRankRMicroMRowBIsTheDocumentedWindow) {
  for (const auto& s : kShapes) {
    const int64_t g = s.batch_per_rank * s.world_size * s.grad_accum;
    const int64_t steps = 3 * s.windows / g + 2;  // wraps around several times
    for (int r = 0; r < s.world_size; ++r) {
      DistributedSampler sampler(options_for(s, r, /*shuffle=*/false));
      for (int64_t step = 0; step < steps; ++step, sampler.advance())
        for (int m = 0; m < s.grad_accum; ++m) {
          const auto rows = sampler.micro_batch(m);
          ASSERT_EQ(rows.size(), static_cast<size_t>(s.batch_per_rank));
          for (int64_t b = 0; b < s.batch_per_rank; ++b)
            ASSERT_EQ(rows[static_cast<size_t>(b)],
                      (step * g + (m * s.world_size + r) * s.batch_per_rank + b) % s.windows)
                << "W=" << s.windows << " step " << step << " rank " << r << " micro " << m << " row " << b;
        }
    }
  }
}

TEST(DistributedSampler, EveryWindowIsUsedOncePerEpochAcrossRanksAndMicroSteps) {
  for (const auto& s : kShapes) {
    const int64_t g = s.batch_per_rank * s.world_size * s.grad_accum;
    expect_each_window_once_per_complete_epoch(s, run_all_ranks(s, /*shuffle=*/true, 42, 4 * s.windows / g + 3));
  }
}

RC_GTEST_PROP(DistributedSampler, EveryWindowOncePerEpochForAnyShape, ()) {
  const Shape s{*rc::gen::inRange<int64_t>(1, 60), *rc::gen::inRange<int64_t>(1, 5), *rc::gen::inRange(1, 5),
                *rc::gen::inRange(1, 4)};
  const auto seed = *rc::gen::arbitrary<uint64_t>();
  const int64_t g = s.batch_per_rank * s.world_size * s.grad_accum;
  const auto by_position = run_all_ranks(s, /*shuffle=*/true, seed, 3 * s.windows / g + 2);
  RC_ASSERT(static_cast<int64_t>(by_position.size()) >= 2 * s.windows);
  for (int64_t e = 0; (e + 1) * s.windows <= static_cast<int64_t>(by_position.size()); ++e) {
    std::set<int64_t> seen;
    for (int64_t p = e * s.windows; p < (e + 1) * s.windows; ++p) seen.insert(by_position.at(p));
    RC_ASSERT(static_cast<int64_t>(seen.size()) == s.windows);
    RC_ASSERT(*seen.begin() == 0 && *seen.rbegin() == s.windows - 1);
  }
}

TEST(DistributedSampler, ShuffleIsAPermutationDeterminedBySeedAndEpoch) {
  const auto p = epoch_permutation(1000, 7, 0);
  std::vector<int64_t> sorted = p, identity(1000);
  std::sort(sorted.begin(), sorted.end());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(p, identity);
  EXPECT_EQ(p, epoch_permutation(1000, 7, 0));
  EXPECT_NE(p, epoch_permutation(1000, 7, 1));
  EXPECT_NE(p, epoch_permutation(1000, 8, 0));

  DistributedSampler sampler(options_for({1000, 4, 2, 1}, 0, /*shuffle=*/true, 7));
  for (int64_t position : {0, 1, 999, 1000, 2500})
    EXPECT_EQ(sampler.window_at(position), epoch_permutation(1000, 7, position / 1000)[position % 1000]);
}

TEST(DistributedSampler, ResumingMidEpochContinuesTheUninterruptedSequence) {
  const Shape s{50, 2, 2, 2};  // G = 8; 50 % 8 != 0, so steps straddle epochs
  std::vector<std::vector<int64_t>> uninterrupted;
  DistributedSampler straight(options_for(s, 0, true, 3));
  for (int step = 0; step < 20; ++step, straight.advance()) uninterrupted.push_back(straight.global_batch_windows());

  DistributedSampler before(options_for(s, 1, true, 3));
  for (int step = 0; step < 9; ++step) before.advance();
  const int64_t saved = before.position();
  EXPECT_EQ(saved, 72);
  EXPECT_EQ(before.epoch(), 1);

  // New sampler objects, as after a restart: every rank resumes from the saved position.
  for (int r = 0; r < s.world_size; ++r) {
    DistributedSampler resumed(options_for(s, r, true, 3));
    resumed.set_position(saved);
    for (int step = 9; step < 20; ++step, resumed.advance()) {
      ASSERT_EQ(resumed.global_batch_windows(), uninterrupted[static_cast<size_t>(step)]);
      for (int m = 0; m < s.grad_accum; ++m) {
        const auto& g = uninterrupted[static_cast<size_t>(step)];
        const auto offset = (m * s.world_size + r) * s.batch_per_rank;
        ASSERT_EQ(resumed.micro_batch(m),
                  std::vector<int64_t>(g.begin() + offset, g.begin() + offset + s.batch_per_rank));
      }
    }
  }
}

TEST(DistributedSampler, ResumingWithAnotherWorldSizeAndTheSameGlobalBatchContinuesTheSequence) {
  const Shape two_ranks{50, 2, 2, 2}, four_ranks{50, 1, 4, 2};  // both G = 8
  DistributedSampler straight(options_for(two_ranks, 0, true, 3));
  std::vector<std::vector<int64_t>> uninterrupted;
  for (int step = 0; step < 20; ++step, straight.advance()) uninterrupted.push_back(straight.global_batch_windows());

  for (int r = 0; r < four_ranks.world_size; ++r) {
    DistributedSampler resumed(options_for(four_ranks, r, true, 3));
    resumed.set_position(9 * 8);
    for (int step = 9; step < 20; ++step, resumed.advance()) {
      const auto& g = uninterrupted[static_cast<size_t>(step)];
      ASSERT_EQ(resumed.global_batch_windows(), g);
      for (int m = 0; m < four_ranks.grad_accum; ++m)
        ASSERT_EQ(resumed.micro_batch(m), std::vector<int64_t>{g[static_cast<size_t>(m * 4 + r)]});
    }
  }
}

TEST(DistributedSampler, RankBatchesWithinAStepAreDisjoint) {
  // A step inside one epoch uses distinct windows (a step that straddles an epoch
  // boundary may repeat one: every window once per epoch comes first).
  for (const auto& s : std::vector<Shape>{{48, 2, 3, 2}, {50, 2, 2, 2}, {12, 1, 4, 3}}) {
    const int64_t g = s.batch_per_rank * s.world_size * s.grad_accum;
    const auto by_position = run_all_ranks(s, true, 11, 3 * s.windows / g);
    for (int64_t start = 0; start + g <= static_cast<int64_t>(by_position.size()); start += g) {
      if (start / s.windows != (start + g - 1) / s.windows) continue;
      std::set<int64_t> windows;
      for (int64_t p = start; p < start + g; ++p) windows.insert(by_position.at(p));
      EXPECT_EQ(static_cast<int64_t>(windows.size()), g) << "step at position " << start;
    }
  }
}

TEST(DistributedSampler, InvalidOptionsThrowNamingTheField) {
  auto expect_rejected = [](const std::string& field, auto spoil) {
    SamplerOptions o = options_for({10, 2, 2, 1}, 0, true);
    spoil(o);
    EXPECT_THAT([&] { DistributedSampler{o}; }, ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr(field)));
  };
  expect_rejected("num_windows", [](SamplerOptions& o) { o.num_windows = 0; });
  expect_rejected("batch_per_rank", [](SamplerOptions& o) { o.batch_per_rank = 0; });
  expect_rejected("world_size", [](SamplerOptions& o) { o.world_size = 0; });
  expect_rejected("rank", [](SamplerOptions& o) { o.rank = 2; });
  expect_rejected("rank", [](SamplerOptions& o) { o.rank = -1; });
  expect_rejected("grad_accum", [](SamplerOptions& o) { o.grad_accum = 0; });

  DistributedSampler sampler(options_for({10, 2, 2, 1}, 0, true));
  EXPECT_THAT([&] { sampler.micro_batch(1); }, ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("micro")));
  EXPECT_THAT([&] { sampler.set_position(-1); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("position")));
}

}  // namespace
}  // namespace fsdpp::data
