// The communicator's byte counters hold the textbook per-rank volumes of bandwidth-optimal
// algorithms (the "bus bytes" of nccl-tests), for B = the op's size in bytes:
//   all-gather (B = output):     sent = received = B (N-1)/N
//   reduce-scatter (B = input):  sent = received = B (N-1)/N
//   all-reduce (B = tensor):     sent = received = 2 B (N-1)/N   (numel divisible by N)
//   all-to-all (B = input):      sent = received = B (N-1)/N     (equal splits)
//   broadcast (scatter + all-gather): root sends 2 B (N-1)/N, others B (N-1)/N
// and a world of one moves nothing.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "harness/testing/multirank.h"

namespace fsdpp {
namespace {

using comm::CollectiveKind;
using comm::ReduceOp;
using harness::RankContext;

class ByteAccounting : public ::testing::TestWithParam<int> {};

void expect_volume(RankContext& ctx, CollectiveKind kind, int64_t sent, int64_t received) {
  auto s = ctx.comm.stats().get(kind);
  EXPECT_EQ(s.calls, 1) << comm::to_string(kind);
  EXPECT_EQ(s.bytes_sent, sent) << comm::to_string(kind) << " on rank " << ctx.rank;
  EXPECT_EQ(s.bytes_received, received) << comm::to_string(kind) << " on rank " << ctx.rank;
  EXPECT_GT(s.busy_ms, 0.0) << comm::to_string(kind);
}

TEST_P(ByteAccounting, EachCollectiveMovesTheTextbookVolume) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    const int64_t n = ctx.world_size;
    for (auto dt : {at::kFloat, at::kBFloat16}) {
      const int64_t es = c10::elementSize(dt);
      const int64_t k = 3000;  // elements per rank piece; N*k is divisible by N
      ctx.comm.stats().reset();

      ctx.comm.all_gather_into(at::empty({n * k}, dt), at::ones({k}, dt));
      const int64_t ag_bytes = n * k * es;  // output
      expect_volume(ctx, CollectiveKind::AllGather, ag_bytes * (n - 1) / n, ag_bytes * (n - 1) / n);

      ctx.comm.reduce_scatter(at::empty({k}, dt), at::ones({n * k}, dt), ReduceOp::Sum);
      const int64_t rs_bytes = n * k * es;  // input
      expect_volume(ctx, CollectiveKind::ReduceScatter, rs_bytes * (n - 1) / n, rs_bytes * (n - 1) / n);

      ctx.comm.all_reduce(at::ones({n * k}, dt), ReduceOp::Sum);
      const int64_t ar_bytes = n * k * es;
      expect_volume(ctx, CollectiveKind::AllReduce, 2 * ar_bytes * (n - 1) / n, 2 * ar_bytes * (n - 1) / n);

      ctx.comm.all_to_all_single(at::empty({n * k}, dt), at::ones({n * k}, dt));
      const int64_t a2a_bytes = n * k * es;
      expect_volume(ctx, CollectiveKind::AllToAll, a2a_bytes * (n - 1) / n, a2a_bytes * (n - 1) / n);

      ctx.comm.broadcast(at::ones({n * k}, dt), 0);
      const int64_t bc_bytes = n * k * es;
      int64_t piece = bc_bytes / n;
      int64_t sent = ctx.rank == 0 ? 2 * (n - 1) * piece : (n - 1) * piece;
      int64_t received = ctx.rank == 0 ? (n - 1) * piece : n * piece;
      if (n == 1) sent = received = 0;
      expect_volume(ctx, CollectiveKind::Broadcast, sent, received);

      ctx.comm.barrier();
      expect_volume(ctx, CollectiveKind::Barrier, 0, 0);
    }
  });
}

TEST_P(ByteAccounting, UnevenAllReduceCountsEveryChunkOnce) {
  harness::expect_ranks_pass(GetParam(), [](RankContext& ctx) {
    const int64_t n = ctx.world_size, numel = 10 * n + 1, es = 4;
    ctx.comm.all_reduce(at::ones({numel}), ReduceOp::Sum);
    // Chunks of ceil(numel/N) = 11 elements; the last rank's chunk is shorter.
    const int64_t chunk = (numel + n - 1) / n;
    const int64_t mine = std::min(numel, chunk * (ctx.rank + 1)) - std::min(numel, chunk * ctx.rank);
    // Phase 1 sends everything but my chunk, phase 2 sends my chunk to N-1 peers.
    const int64_t sent = (numel - mine) * es + (n - 1) * mine * es;
    const int64_t received = (n - 1) * mine * es + (numel - mine) * es;
    auto s = ctx.comm.stats().get(CollectiveKind::AllReduce);
    EXPECT_EQ(s.bytes_sent, sent);
    EXPECT_EQ(s.bytes_received, received);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ByteAccounting, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(ByteAccountingSolo, AWorldOfOneSendsNothing) {
  auto c = comm::Communicator::connect(comm::WorldSpec{});
  auto t = at::ones({100});
  c->all_reduce(t, ReduceOp::Sum);
  c->all_gather_into(at::empty({100}), t);
  EXPECT_EQ(c->stats().total().bytes_sent, 0);
  EXPECT_EQ(c->stats().total().bytes_received, 0);
}

}  // namespace
}  // namespace fsdpp
