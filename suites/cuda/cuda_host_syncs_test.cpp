// On a GPU, a training step that is not logged makes the host wait for nothing: no item(),
// no value-dependent shape, no copy into host memory (HostReadCounter), so the host queues
// the next step while the device runs this one. The CPU's HostSyncs.* count the same reads
// of the device-agnostic code; this runs it where the reads would be syncs.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/train/run_inputs.h"
#include "core/train/trainer.h"
#include "harness/testing/host_reads.h"
#include "harness/testing/token_streams.h"
#include "suites/cuda/cuda_testing.h"

namespace fsdpp {
namespace {

TEST(CudaHostSyncs, AStepOnTheGpuReadsNothingUnlessItIsLogged) {
  REQUIRE_GPUS(1);
  harness::expect_ranks_pass(
      1,
      [](harness::RankContext& ctx) {
        train::TrainConfig c;
        c.from_scratch = true;
        c.model_type = "llama";
        c.model_size = "tiny";
        c.vocab_size = 64;
        c.data = harness::write_markov_tokens(ctx.shared_dir, 4000, 64).string();
        c.seq_len = 16;
        c.batch_size = 2;
        c.grad_accum_steps = 2;
        c.max_steps = 9;
        c.log_freq = 4;
        c.grad_clip = 1.0;
        c.mixed_precision = "bf16";
        c.device = "cuda";
        c.save_dir = (ctx.shared_dir / "runs").string();
        harness::HostReadsPerStep reads;
        train::train(ctx.comm, c, train::preflight(c), 0, &reads);
        for (int64_t step : {2, 3, 5, 6, 7}) EXPECT_EQ(reads.reads().at(step), 0) << "step " << step;
        EXPECT_EQ(reads.reads().at(4), 2 * 3);
        EXPECT_EQ(reads.reads().at(8), 2 * 4);
      },
      cuda_testing::with_env({{"FSDPP_CUDA_COMM", "nccl"}}));
}

}  // namespace
}  // namespace fsdpp
