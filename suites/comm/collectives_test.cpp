// Every collective, on 1-4 ranks, in every dtype it allows and at uneven sizes, equals
// the single-process computation of the same result (harness/oracle).
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/comm/device_mesh.h"
#include "harness/oracle/collective_reference.h"
#include "harness/oracle/tolerance.h"
#include "harness/testing/multirank.h"

namespace fsdpp {
namespace {

using comm::ReduceOp;
using harness::RankContext;

const std::vector<at::ScalarType> kAllDtypes = {at::kFloat, at::kBFloat16, at::kHalf, at::kLong};

std::vector<ReduceOp> ops_for(at::ScalarType dt) {
  if (at::isFloatingType(dt)) return {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};
  return {ReduceOp::Sum, ReduceOp::Max};
}

std::string label(const char* op, at::ScalarType dt, int64_t numel) {
  return std::string(op) + " " + c10::toString(dt) + " numel " + std::to_string(numel);
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllGatherEqualsRankOrderConcatenation) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    int n = ctx.world_size;
    for (auto dt : kAllDtypes)
      for (int64_t k : {1, 5, 1001}) {
        auto out = at::empty({k * n}, dt);
        ctx.comm.all_gather_into(out, harness::rank_input(ctx.rank, k, dt, 7));
        // A concatenation moves bytes and computes nothing: equal bit for bit, not within a tolerance.
        EXPECT_TRUE(harness::bitwise_equal(out, harness::reference_all_gather(harness::all_rank_inputs(n, k, dt, 7))))
            << label("all_gather", dt, k);
      }
  });
}

TEST_P(Collectives, ReduceScatterEqualsThisRanksSliceOfTheReduction) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    int n = ctx.world_size;
    for (auto dt : kAllDtypes)
      for (auto op : ops_for(dt)) {
        if (op == ReduceOp::Max) continue;
        for (int64_t k : {1, 3, 333}) {
          auto out = at::empty({k}, dt);
          ctx.comm.reduce_scatter(out, harness::rank_input(ctx.rank, k * n, dt, 11), op);
          auto full = harness::reference_reduce(harness::all_rank_inputs(n, k * n, dt, 11), op);
          auto cmp = harness::compare(out, full.narrow(0, ctx.rank * k, k));
          EXPECT_TRUE(cmp.ok) << label("reduce_scatter", dt, k) << " " << comm::to_string(op) << ": " << cmp.describe();
        }
      }
  });
}

TEST_P(Collectives, AllReduceEqualsTheReductionEvenWhenShorterThanTheWorld) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    int n = ctx.world_size;
    for (auto dt : kAllDtypes)
      for (auto op : ops_for(dt))
        for (int64_t numel : {int64_t{1}, int64_t{n + 1}, int64_t{7}, int64_t{1000}}) {
          auto t = harness::rank_input(ctx.rank, numel, dt, 13).view({-1, 1});  // 2-D on purpose
          ctx.comm.all_reduce(t, op);
          auto expected = harness::reference_reduce(harness::all_rank_inputs(n, numel, dt, 13), op);
          auto cmp = harness::compare(t, expected);
          EXPECT_TRUE(cmp.ok) << label("all_reduce", dt, numel) << " " << comm::to_string(op) << ": " << cmp.describe();
        }
  });
}

TEST_P(Collectives, BroadcastCopiesTheRootsTensorFromEveryRoot) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    for (auto dt : kAllDtypes)
      for (int root = 0; root < ctx.world_size; ++root)
        for (int64_t numel : {1, 6, 999}) {
          auto t = harness::rank_input(ctx.rank, numel, dt, 17);
          ctx.comm.broadcast(t, root);
          EXPECT_TRUE(harness::bitwise_equal(t, harness::rank_input(root, numel, dt, 17)))
              << label("broadcast", dt, numel) << " from root " << root;
        }
  });
}

TEST_P(Collectives, AllToAllSingleDeliversUnevenSplits) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    int n = ctx.world_size;
    // Rank j sends (j + 2k) % 3 elements to rank k: some zero, all different.
    std::vector<std::vector<int64_t>> splits(n, std::vector<int64_t>(n));
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) splits[j][k] = (j + 2 * k) % 3;
    std::vector<int64_t> sent_by(n, 0), out_splits(n);
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < n; ++k) sent_by[j] += splits[j][k];
      out_splits[j] = splits[j][ctx.rank];
    }
    for (auto dt : kAllDtypes) {
      std::vector<at::Tensor> inputs;
      inputs.reserve(n);
      for (int j = 0; j < n; ++j) inputs.push_back(harness::rank_input(j, sent_by[j], dt, 19));
      auto expected = harness::reference_all_to_all(inputs, splits, ctx.rank);
      auto out = at::empty({expected.numel()}, dt);
      ctx.comm.all_to_all_single(out, inputs[ctx.rank], out_splits, splits[ctx.rank]);
      EXPECT_TRUE(harness::bitwise_equal(out, expected)) << "all_to_all " << c10::toString(dt);
    }
  });
}

// communicator.h's promise: *_async returns at once, so the caller computes while its
// collectives wait for their peers, and collectives complete in issue order. The other ranks
// issue theirs only after rank 0's six calls have returned and rank 0 has computed (a file
// in the group's shared folder says so): at N >= 2 none of rank 0's collectives can complete
// before that, so a call that waited for its collective would never return.
TEST_P(Collectives, AsyncCollectivesCompleteInIssueOrderWhileTheCallerComputes) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    int n = ctx.world_size;
    const auto issued = ctx.shared_dir / "rank0-issued-and-computed";
    if (ctx.rank != 0) harness::wait_for_file(issued, std::chrono::seconds(60));
    std::vector<at::Tensor> tensors;
    std::vector<comm::CommWork> works;
    for (int i = 0; i < 6; ++i) {
      tensors.push_back(harness::rank_input(ctx.rank, 4096 + i, at::kFloat, 100 + i));
      works.push_back(ctx.comm.all_reduce_async(tensors.back(), ReduceOp::Sum));
    }
    if (ctx.rank == 0) {
      for (int i = 0; i < 6 && n > 1; ++i) EXPECT_FALSE(works[i].completed()) << "#" << i << " before any peer issued";
      auto busy = at::mm(at::ones({64, 64}), at::ones({64, 64}));  // the caller computes meanwhile
      EXPECT_EQ(busy[0][0].item<float>(), 64.0f);
      std::ofstream(issued) << "go\n";
    }
    works[5].wait();  // the last issued: every earlier one has completed too
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(works[i].completed()) << "#" << i << " completed after #5";
    for (int i = 0; i < 6; ++i) {
      works[i].wait();
      auto expected =
          harness::reference_reduce(harness::all_rank_inputs(n, 4096 + i, at::kFloat, 100 + i), ReduceOp::Sum);
      EXPECT_TRUE(harness::compare(tensors[i], expected).ok) << "async all_reduce #" << i;
    }
  });
}

TEST_P(Collectives, FloatSumsAreBitwiseTheRankOrderSum) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    int n = ctx.world_size;
    auto inputs = harness::all_rank_inputs(n, 10007, at::kFloat, 23);
    auto in_order = inputs[0].clone();
    for (int j = 1; j < n; ++j) in_order.add_(inputs[j]);
    auto t = inputs[ctx.rank].clone();
    ctx.comm.all_reduce(t, ReduceOp::Sum);
    EXPECT_TRUE(harness::bitwise_equal(t, in_order));
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(HybridMesh, RowsShardAndColumnsReplicateOnA2x2World) {
  harness::expect_ranks_pass(4, [](RankContext& ctx) {
    auto mesh = comm::make_hybrid_mesh(ctx.comm, 2);
    EXPECT_EQ(mesh.shard->size(), 2);
    EXPECT_EQ(mesh.replicate->size(), 2);
    auto row_sum = at::full({3}, static_cast<int64_t>(ctx.rank));
    mesh.shard->all_reduce(row_sum, ReduceOp::Sum);
    auto column_sum = at::full({3}, static_cast<int64_t>(ctx.rank));
    mesh.replicate->all_reduce(column_sum, ReduceOp::Sum);
    int row = ctx.rank / 2, column = ctx.rank % 2;
    EXPECT_EQ(row_sum[0].item<int64_t>(), 4 * row + 1);        // {0,1} -> 1, {2,3} -> 5
    EXPECT_EQ(column_sum[0].item<int64_t>(), 2 + 2 * column);  // {0,2} -> 2, {1,3} -> 4
  });
}

TEST(HybridMesh, ShardSizeThatDoesNotDivideTheWorldIsRejected) {
  harness::expect_ranks_pass(
      3, [](RankContext& ctx) { EXPECT_THROW(comm::make_hybrid_mesh(ctx.comm, 2), std::invalid_argument); });
}

// Single-process communicator (world size 1): argument errors need no peers.
std::shared_ptr<comm::Communicator> solo() { return comm::Communicator::connect(comm::WorldSpec{}); }

TEST(CollectiveArguments, AvgOfAnIntegerTensorIsRejectedNamingTheDtype) {
  auto c = solo();
  auto t = at::zeros({4}, at::kLong);
  try {
    c->all_reduce(t, ReduceOp::Avg);
    FAIL() << "expected CommError";
  } catch (const comm::CommError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("avg needs a floating dtype"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("Long"));
  }
}

TEST(CollectiveArguments, WrongOutputSizeIsRejected) {
  auto c = solo();
  EXPECT_THROW(c->all_gather_into(at::empty({3}), at::empty({2})), comm::CommError);
  EXPECT_THROW(c->reduce_scatter(at::empty({3}), at::empty({2}), ReduceOp::Sum), comm::CommError);
  EXPECT_THROW(c->all_gather_into(at::empty({2}, at::kHalf), at::empty({2})), comm::CommError);
  EXPECT_THROW(c->broadcast(at::empty({2}), 1), comm::CommError);
}

TEST(CollectiveArguments, ATensorOnADeviceNoBackendMovesIsRefusedNamingTheOpAndTheDevice) {
  // Backends are tried in order (core/comm/backend.h): Gloo serves CPU tensors, NCCL or
  // host staging CUDA tensors in a CUDA build; a meta tensor is served by none.
  auto c = solo();
  const auto expect_refused = [](const std::function<void()>& call, const std::string& op) {
    try {
      call();
      FAIL() << op << ": expected CommError";
    } catch (const comm::CommError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(op));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("tensor is on meta"));
    }
  };
  const auto meta = [] { return at::empty({4}, at::TensorOptions().device(at::kMeta)); };
  expect_refused([&] { c->all_reduce(meta(), ReduceOp::Sum); }, "all_reduce[sum](4 x Float)");
  expect_refused([&] { c->broadcast(meta(), 0); }, "broadcast[root 0](4 x Float)");
  expect_refused([&] { c->all_gather_into(at::empty({4}), meta()); }, "all_gather_into(4 x Float)");
  expect_refused([&] { c->reduce_scatter(meta(), at::empty({4}), ReduceOp::Sum); }, "reduce_scatter[sum](4 x Float)");
  expect_refused([&] { c->all_to_all_single(at::empty({4}), meta()); }, "all_to_all_single(4 x Float)");
}

// A collective whose own work throws on one rank (here ATen refuses an in-place copy into a
// leaf that requires grad) fails its wait with a CommError naming the op and ATen's reason:
// never a wait that returns as if the output had been written.
TEST(CollectiveFailuresOnOneRank, AnErrorInsideTheCollectiveFailsItsWaitNamingTheOpAndTheCause) {
  auto c = solo();
  auto output = at::zeros({4}).requires_grad_(true);
  try {
    c->all_gather_into(output, at::ones({4}));
    FAIL() << "expected CommError";
  } catch (const comm::CommError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("all_gather_into(4 x Float)"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("requires grad"));
  }
  EXPECT_TRUE(at::equal(output.detach(), at::zeros({4})));
}

// The sockets one rank holds (a count of /proc/self/fd entries that are sockets).
int open_sockets() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

// shutdown() releases the Gloo mesh's connections to the peers at once, not when the last
// reference to the communicator goes (a rank that keeps its Communicator after shutdown
// would hold a socket per peer).
TEST(Shutdown, ClosesThePeerConnectionsBeforeTheCommunicatorIsDestroyed) {
  harness::expect_ranks_pass(3, [](RankContext& ctx) {
    auto t = at::ones({8});
    ctx.comm.all_reduce(t, ReduceOp::Sum);  // the mesh is connected
    const int before = open_sockets();
    ctx.comm.shutdown();
    const int after = open_sockets();
    // Gloo connects every pair: at least one socket per peer goes.
    EXPECT_LE(after, before - (ctx.world_size - 1)) << before << " sockets before shutdown, " << after << " after";
  });
}

}  // namespace
}  // namespace fsdpp
