// runtime::parallel_chunks: fsdpp's host loops (the offloaded AdamW step, seeded
// initialisation) run on the rank's intra-op threads, which LibTorch's header-only
// at::parallel_for does not give code built without -fopenmp.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/runtime/threads.h"

using fsdpp::runtime::parallel_chunks;

namespace {

// Restores LibTorch's intra-op thread count.
struct IntraOpThreads {
  explicit IntraOpThreads(int n) : saved(at::get_num_threads()) { at::set_num_threads(n); }
  ~IntraOpThreads() { at::set_num_threads(saved); }
  int saved;
};

struct Record {
  std::mutex mu;
  std::vector<int> hits;
  std::set<std::thread::id> threads;
};

void run(Record& rec, int64_t n, int64_t min_chunk) {
  rec.hits.assign(static_cast<size_t>(n), 0);
  parallel_chunks(n, min_chunk, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(rec.mu);
    rec.threads.insert(std::this_thread::get_id());
    for (int64_t i = begin; i < end; ++i) ++rec.hits[static_cast<size_t>(i)];
  });
}

}  // namespace

TEST(ParallelChunks, CoversTheRangeOnceSplitOverTheIntraOpThreads) {
  IntraOpThreads threads(3);
  Record rec;
  run(rec, 1000, 1);
  for (int h : rec.hits) ASSERT_EQ(h, 1);
  EXPECT_EQ(rec.threads.size(), 3u);  // one piece a thread, the caller's among them
  EXPECT_TRUE(rec.threads.count(std::this_thread::get_id()));
}

TEST(ParallelChunks, PiecesShorterThanTheMinimumRunOnFewerThreads) {
  IntraOpThreads threads(4);
  Record rec;
  run(rec, 10, 5);  // two pieces of 5
  for (int h : rec.hits) ASSERT_EQ(h, 1);
  EXPECT_EQ(rec.threads.size(), 2u);
  Record alone;
  run(alone, 10, 100);  // one piece: the caller's thread alone
  for (int h : alone.hits) ASSERT_EQ(h, 1);
  EXPECT_EQ(alone.threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(ParallelChunks, AWorkersExceptionReachesTheCallerAfterEveryPieceRan) {
  IntraOpThreads threads(2);
  std::vector<int> done(2, 0);
  EXPECT_THROW(parallel_chunks(2, 1,
                               [&](int64_t begin, int64_t) {
                                 done[static_cast<size_t>(begin)] = 1;
                                 if (begin == 1) throw std::runtime_error("piece 1");
                               }),
               std::runtime_error);
  EXPECT_EQ(done, (std::vector<int>{1, 1}));
}

TEST(ParallelChunks, AnEmptyRangeCallsNothing) {
  bool called = false;
  parallel_chunks(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}
