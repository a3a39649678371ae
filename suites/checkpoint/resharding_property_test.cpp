// Resharding, as a property over random shapes, dtypes and (writers N, readers M): the
// rows that N ranks saved come back bit for bit for whatever rows M ranks ask for.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <torch/torch.h>

#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/checkpoint_scan.h"
#include "core/checkpoint/checkpoint_writer.h"
#include "harness/testing/temp_dir.h"
#include "suites/checkpoint/checkpoint_fixtures.h"

namespace fsdpp::checkpoint {
namespace {

using testing::bitwise_equal;

// A random tensor of a random shape: 0-d, empty, one row, rows not divisible by the
// rank counts; each row of 0 to 3 dims.
at::Tensor random_tensor() {
  const int dims = *rc::gen::inRange(0, 4);
  std::vector<int64_t> shape;
  for (int i = 0; i < dims; ++i) shape.push_back(*rc::gen::inRange<int64_t>(0, i == 0 ? 12 : 4));
  const auto dtype = *rc::gen::element(at::kFloat, at::kBFloat16, at::kLong, at::kDouble, at::kHalf);
  if (at::isFloatingType(dtype)) return torch::randn(shape).to(dtype);
  return torch::randint(-1000000, 1000000, shape, at::kLong).to(dtype);
}

RC_GTEST_PROP(Resharding, RowsSavedByNWritersLoadBitwiseForAnyRowRangeOfMReaders, ()) {
  torch::manual_seed(*rc::gen::arbitrary<uint32_t>());
  const int writers = *rc::gen::inRange(1, 6), readers = *rc::gen::inRange(1, 6);
  std::vector<std::pair<std::string, at::Tensor>> tensors = {{"model/a", random_tensor()},
                                                             {"optim/a/exp_avg", random_tensor()}};
  harness::TempDir tmp("ckpt-prop");
  write_checkpoint(tmp / step_dir_name(1), testing::split_like_fsdp(tensors, writers), {{"n", writers}});

  auto reader = load_checkpoint(tmp / step_dir_name(1));
  RC_ASSERT(reader.index().world_size == writers);
  for (const auto& [name, full] : tensors) {
    RC_ASSERT(bitwise_equal(reader.read(name), full));
    // Every reader's FSDP rows, into a buffer full of garbage.
    for (int r = 0; r < readers; ++r) {
      auto want = testing::fsdp_rows(name, full, readers, r);
      auto out = at::full(want.rows.sizes(), 7, want.rows.options());
      reader.read_rows(name, want.first_row, out);
      RC_ASSERT(bitwise_equal(out, want.rows));
    }
    // And any range at all.
    const int64_t dim0 = full.dim() == 0 ? 1 : full.size(0);
    const int64_t begin = *rc::gen::inRange<int64_t>(0, dim0 + 1);
    const int64_t end = *rc::gen::inRange<int64_t>(begin, dim0 + 1);
    auto want = testing::rows_of(full, begin, end - begin);
    auto out = at::zeros_like(want);
    reader.read_rows(name, begin, out);
    RC_ASSERT(bitwise_equal(out, want));
  }
}

TEST(Resharding, ReadsIntoNonContiguousOutputs) {
  harness::TempDir tmp("ckpt-strided");
  auto full = torch::arange(24, at::kFloat).reshape({6, 4});
  write_checkpoint(tmp / "step-000001", testing::split_like_fsdp({{"w", full}}, 4), {});
  auto reader = load_checkpoint(tmp / "step-000001");
  auto out = torch::zeros({4, 3});  // out.t(): rows 1..3 of w, as a transposed view
  reader.read_rows("w", 1, out.t());
  EXPECT_TRUE(bitwise_equal(out.t().contiguous(), full.narrow(0, 1, 3)));
}

}  // namespace
}  // namespace fsdpp::checkpoint
