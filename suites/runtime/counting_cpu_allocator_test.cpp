// CountingCpuAllocator (core/runtime/counting_cpu_allocator.h): the bytes of CPU tensors
// alive and their peak, moved exactly by each storage's allocation and free.
// ctest runs each test suite in its own process; CountingCpuAllocatorInstallation needs a
// process where nothing has installed the counter yet, and is declared first so that a
// plain run of the whole binary also runs it first.
#include "core/runtime/counting_cpu_allocator.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace fsdpp::runtime {
namespace {

TEST(CountingCpuAllocatorInstallation, BlocksFromBeforeInstallationAreFreedUncounted) {
  ASSERT_FALSE(CountingCpuAllocator::installed()) << "run this suite in a process of its own (ctest does)";
  auto before = at::empty({1000}, at::kFloat);
  void* raw_before = c10::GetCPUAllocator()->raw_allocate(512);
  CountingCpuAllocator::install();
  ASSERT_TRUE(CountingCpuAllocator::installed());
  const int64_t start = CountingCpuAllocator::live_bytes();
  before.reset();
  c10::GetCPUAllocator()->raw_deallocate(raw_before);  // through the counter's raw deleter
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start);
  auto after = at::empty({1000}, at::kFloat);
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 4000);
  after.reset();
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start);
}

class CountingCpuAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override { CountingCpuAllocator::install(); }
};

TEST_F(CountingCpuAllocatorTest, AllocatingAndFreeingATensorMovesLiveBytesByItsStorage) {
  const int64_t start = CountingCpuAllocator::live_bytes();
  auto a = at::empty({3, 5}, at::kDouble);  // 120 bytes
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 120);
  auto b = at::zeros({7}, at::kBFloat16);  // 14 bytes
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 134);
  auto view = a.narrow(0, 1, 2);  // shares a's storage
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 134);
  a.reset();
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 134) << "the view keeps the storage alive";
  view.reset();
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 14);
  b.reset();
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start);
}

TEST_F(CountingCpuAllocatorTest, ResizingAStorageCountsTheNewSizeOnly) {
  const int64_t start = CountingCpuAllocator::live_bytes();
  auto t = at::empty({10}, at::kFloat);
  t.resize_({1000});
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 4000);
  t.reset();
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start);
}

TEST_F(CountingCpuAllocatorTest, PeakHoldsTheHighestLiveBytesUntilReset) {
  CountingCpuAllocator::reset_peak();
  const int64_t start = CountingCpuAllocator::live_bytes();
  EXPECT_EQ(CountingCpuAllocator::peak_bytes(), start);
  {
    auto big = at::empty({1 << 20}, at::kFloat);  // 4 MiB
    auto small = at::empty({256}, at::kFloat);    // 1 KiB
    EXPECT_EQ(CountingCpuAllocator::peak_bytes(), start + (4 << 20) + 1024);
  }
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start);
  EXPECT_EQ(CountingCpuAllocator::peak_bytes(), start + (4 << 20) + 1024);
  auto kept = at::empty({100}, at::kFloat);
  CountingCpuAllocator::reset_peak();
  EXPECT_EQ(CountingCpuAllocator::peak_bytes(), start + 400);
  { auto more = at::empty({50}, at::kFloat); }
  EXPECT_EQ(CountingCpuAllocator::peak_bytes(), start + 600);
}

TEST_F(CountingCpuAllocatorTest, TheRawInterfaceIsCounted) {
  const int64_t start = CountingCpuAllocator::live_bytes();
  void* p = c10::GetCPUAllocator()->raw_allocate(1000);  // what oneDNN's engine allocator calls
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 1000);
  c10::GetCPUAllocator()->raw_deallocate(p);
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start);
}

TEST_F(CountingCpuAllocatorTest, AnOperatorsTemporariesAreFreedAndItsOutputStaysCounted) {
  auto x = at::randn({64, 64});
  const int64_t start = CountingCpuAllocator::live_bytes();
  auto y = at::matmul(x, x).relu().sum(0);  // 64 floats survive
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 64 * 4);
}

TEST_F(CountingCpuAllocatorTest, ConcurrentAllocationsAndFreesBalance) {
  const int64_t start = CountingCpuAllocator::live_bytes();
  std::vector<std::thread> threads;
  std::vector<at::Tensor> kept(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &kept] {
      for (int i = 0; i < 2000; ++i) auto tmp = at::empty({i % 97 + 1}, at::kFloat);
      kept[t] = at::empty({t + 1}, at::kDouble);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start + 8 * (1 + 2 + 3 + 4));
  kept.clear();
  EXPECT_EQ(CountingCpuAllocator::live_bytes(), start);
}

}  // namespace
}  // namespace fsdpp::runtime
