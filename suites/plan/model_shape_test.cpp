// The plan's model shape is the real one: the meta-device build gives the same units and
// shard bytes as ShardedModel::create on real ranks, and the presets' parameter counts.
#include "core/plan/model_shape.h"

#include <gtest/gtest.h>

#include "core/fsdp/sharded_model.h"
#include "core/models/causal_lm.h"
#include "core/models/llama.h"
#include "core/models/presets.h"
#include "core/plan/memory_model.h"
#include "harness/testing/multirank.h"

namespace fsdpp {
namespace {

TEST(PlanModelShape, UnitsAndShardBytesAreThoseShardedModelMakes) {
  for (const char* type : {"gpt2", "opt", "llama"}) {
    auto config = models::from_scratch_config(type, "tiny", 250);  // 250 rows: padding on 3 ranks
    const auto shape = plan::ModelShape::of_config(config, type);
    for (int n : {2, 3}) {
      plan::PlanConfig pc;
      pc.nproc = n;
      pc.seq_len = 16;
      const auto memory = plan::estimate_memory(shape, pc);
      harness::expect_ranks_pass(n, [&](harness::RankContext& ctx) {
        auto lm = models::build_causal_lm(config, type);
        auto sharded = fsdp::ShardedModel::create(lm.module, ctx.comm, {}, fsdp::wrap_by_module_type({lm.block_type}));
        ASSERT_EQ(sharded->units().size(), shape.units.size()) << type;
        for (size_t i = 0; i < shape.units.size(); ++i) {
          EXPECT_EQ(sharded->units()[i]->name(), shape.units[i].name) << type;
          EXPECT_EQ(sharded->units()[i]->params().size(), shape.units[i].params.size()) << type;
        }
        EXPECT_EQ(sharded->memory().shard_bytes, memory.param_shard_bytes) << type << " n=" << n;
        if (ctx.rank == 0) {
          EXPECT_EQ(sharded->memory().padding_bytes, memory.padding_bytes) << type << " n=" << n;
        }
      });
    }
  }
}

TEST(PlanModelShape, BigPresetsHaveTheirPublishedParameterCounts) {
  // Llama 3 8B: 8,030,261,248 parameters (meta-llama/Meta-Llama-3-8B); Llama 2 70B: 68,976,648,192.
  const auto eight = plan::ModelShape::of_config(models::from_scratch_config("llama", "8B"), "llama 8B");
  EXPECT_EQ(eight.parameter_count(), 8030261248);
  EXPECT_EQ(eight.parameter_count(), models::llama_preset("8B").parameter_count());
  const auto seventy = plan::ModelShape::of_config(models::from_scratch_config("llama", "70B"), "llama 70B");
  EXPECT_EQ(seventy.parameter_count(), models::llama_preset("70B").parameter_count());
  EXPECT_EQ(seventy.units.size(), 81u);  // 80 decoder layers and the root
}

}  // namespace
}  // namespace fsdpp
