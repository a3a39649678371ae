// The plan's model shape is the real one: the meta-device build gives the same units and
// shard bytes as ShardedModel::create on real ranks, and the presets' parameter counts; the
// projection it says a recomputation skips is the one the model skips.
#include "core/plan/model_shape.h"

#include <gtest/gtest.h>

#include "core/fsdp/sharded_model.h"
#include "core/fsdp/sharding.h"
#include "core/models/causal_lm.h"
#include "core/models/llama.h"
#include "core/models/presets.h"
#include "core/plan/memory_model.h"
#include "core/plan/step_time_model.h"
#include "harness/testing/multirank.h"

namespace fsdpp {
namespace {

// --no-reshard-after-forward in the plan: the all-gather bytes it predicts for a step are
// those ShardedModel sends with the same units (module order, negative from the end) set to
// reshard_after_forward = false, fewer than with every unit resharding; the kept units'
// unsharded bytes join the bytes in flight at the loss.
TEST(PlanKeptUnits, AllGatherBytesAreThoseShardedModelSendsWithTheSameUnitsKept) {
  auto config = models::from_scratch_config("gpt2", "mini", 250);
  const auto shape = plan::ModelShape::of_config(config, "gpt2");
  plan::PlanConfig every;
  every.nproc = 2;
  every.seq_len = 16;
  plan::PlanConfig kept = every;
  kept.no_reshard_after_forward = {0, -1};
  const auto planned = plan::estimate_memory(shape, kept);
  const auto planned_every = plan::estimate_memory(shape, every);
  EXPECT_LT(planned.comm.all_gather, planned_every.comm.all_gather);
  EXPECT_GT(planned.unsharded_in_flight_bytes, planned_every.unsharded_in_flight_bytes);
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    auto lm = models::build_causal_lm(config, "gpt2");
    auto sharded = fsdp::ShardedModel::create(lm.module, ctx.comm, {}, fsdp::wrap_by_module_type({lm.block_type}));
    const auto modules = sharded->wrapped_modules();
    ASSERT_EQ(modules.size() + 1, shape.units.size());
    sharded->set_reshard_after_forward(*modules.front().second, false);
    sharded->set_reshard_after_forward(*modules.back().second, false);
    sharded->reset_comm_stats();
    lm.logits(torch::randint(0, 250, {1, 16})).sum().backward();
    EXPECT_EQ(sharded->comm_stats(comm::CollectiveKind::AllGather).bytes_sent, planned.comm.all_gather);
  });
  kept.strategy = fsdp::ShardingStrategy::ShardGradOp;
  EXPECT_THROW(plan::estimate_memory(shape, kept), std::invalid_argument);
  kept.strategy = fsdp::ShardingStrategy::FullShard;
  kept.no_reshard_after_forward = {4};  // mini has 4 blocks: 0 to 3
  EXPECT_THROW(plan::estimate_memory(shape, kept), std::invalid_argument);
}

// --reshard-after-forward-group-size in the plan: on 4 ranks with pairs (K = 2) and the last
// block kept unsharded, the all-gather bytes it predicts are those ShardedModel sends with the
// same controls, and the pieces held after forward are the bytes it adds in flight at the loss.
TEST(PlanReshardToAGroup, AllGatherBytesAndHeldPiecesAreThoseShardedModelHasWithTheSameGroups) {
  auto config = models::from_scratch_config("gpt2", "mini", 250);
  const auto shape = plan::ModelShape::of_config(config, "gpt2");
  plan::PlanConfig kept;
  kept.nproc = 4;
  kept.seq_len = 16;
  kept.no_reshard_after_forward = {-1};
  plan::PlanConfig hpz = kept;
  hpz.reshard_after_forward_group_size = 2;
  const auto planned = plan::estimate_memory(shape, hpz);
  const auto planned_kept = plan::estimate_memory(shape, kept);
  EXPECT_LT(planned.comm.all_gather, planned_kept.comm.all_gather);
  harness::expect_ranks_pass(4, [&](harness::RankContext& ctx) {
    auto lm = models::build_causal_lm(config, "gpt2");
    auto sharded = fsdp::ShardedModel::create(lm.module, ctx.comm, {}, fsdp::wrap_by_module_type({lm.block_type}));
    const auto modules = sharded->wrapped_modules();
    for (size_t i = 0; i + 1 < modules.size(); ++i) sharded->set_reshard_after_forward(*modules[i].second, 2);
    sharded->set_reshard_after_forward(*modules.back().second, false);
    sharded->reset_comm_stats();
    auto loss = lm.logits(torch::randint(0, 250, {1, 16})).sum();
    int64_t pieces = 0;
    for (const auto& unit : sharded->units()) pieces += unit->post_forward_bytes();
    EXPECT_EQ(pieces, planned.unsharded_in_flight_bytes - planned_kept.unsharded_in_flight_bytes);
    loss.backward();
    EXPECT_EQ(sharded->comm_stats(comm::CollectiveKind::AllGather).bytes_sent, planned.comm.all_gather);
  });
  for (int size : {1, 3, 4}) {
    hpz.reshard_after_forward_group_size = size;
    EXPECT_THROW(plan::estimate_memory(shape, hpz), std::invalid_argument) << size;
  }
}

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
        if (ctx.rank == 0) {  // the plan states rank 0's padding, which ceil-divided rows make 0
          EXPECT_EQ(sharded->memory().padding_bytes, memory.padding_bytes) << type << " n=" << n;
        }
        if (ctx.rank == n - 1) {  // the padding is on the last ranks: the shape's layout, held there
          int64_t last_rank_padding = 0;
          for (const auto& unit : shape.units)
            for (const auto& p : unit.params) {
              const auto layout = fsdp::ShardLayout::of(p.shape, n);
              last_rank_padding += (layout.shard_rows - layout.valid_rows(n - 1)) * layout.row_numel * 4;
            }
          if (n == 3) {
            EXPECT_GT(last_rank_padding, 0) << type;  // 250 rows on 3 ranks
          }
          EXPECT_EQ(sharded->memory().padding_bytes, last_rank_padding) << type << " n=" << n;
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

// The projection ModelShape says a recomputation skips is the parameter each family calls
// through nn::call_summed, and the step-time model takes exactly its FLOPs off every
// recomputed block: 2 per weight element per token (suites/fsdp/activation_checkpoint_test
// shows the model skipping it).
TEST(PlanModelShape, TheSkippedProjectionIsTheMlpOutputAndComesOffEachRecomputedBlock) {
  struct Case {
    const char* type;
    bool post_norm;
    const char* projection;  // layer 0's
  };
  for (const Case& k : {Case{"gpt2", false, "transformer.h.0.mlp.c_proj.weight"},
                        Case{"llama", false, "model.layers.0.mlp.down_proj.weight"},
                        Case{"opt", false, "model.decoder.layers.0.fc2.weight"},
                        Case{"opt", true, "model.decoder.layers.0.fc2.weight"}}) {
    SCOPED_TRACE(std::string(k.type) + (k.post_norm ? " post-norm" : ""));
    auto config = models::from_scratch_config(k.type, "tiny");
    if (k.post_norm) config["do_layer_norm_before"] = false;
    const auto shape = plan::ModelShape::of_config(config, k.type);
    int64_t numel = -1;
    for (const auto& p : shape.named_parameters)
      if (p.name == k.projection) numel = p.numel();
    ASSERT_GT(numel, 0);
    EXPECT_EQ(shape.skipped_projection_params, k.post_norm ? 0 : numel);

    plan::PlanConfig pc;
    pc.device = plan::device_spec("h100");
    pc.batch_size = 2;
    pc.seq_len = 64;
    pc.activation_checkpointing = true;
    pc.ac_freq = 2;  // every other block: half the layers recompute
    auto flops = [&](bool skips) {
      pc.recompute_skips_summed = skips;
      return plan::estimate_step_time(shape, pc, plan::estimate_memory(shape, pc)).flops_per_step_per_rank;
    };
    const double tokens = 2.0 * 64,
                 recomputed_blocks =
                     static_cast<double>(shape.layers / pc.ac_freq);  // NOLINT(bugprone-integer-division): whole blocks
    EXPECT_DOUBLE_EQ(flops(false) - flops(true),
                     2.0 * static_cast<double>(shape.skipped_projection_params) * recomputed_blocks * tokens);
    pc.activation_checkpointing = false;
    EXPECT_EQ(flops(true), flops(false));  // nothing is recomputed without AC
  }
}

// A mixture of experts: memory counts every expert (Mixtral 8x7B's 46.7B parameters), FLOPs
// the active ones: each token runs 2 of the 8 experts, so the model FLOPs per token are 6 x
// (attention, router and head weights + a quarter of the experts'), Mixtral's 12.9B active
// parameters less its embedding lookup and norms; a recomputed sparse block skips nothing.
TEST(PlanModelShape, ExpertsCountInFullForMemoryAndAtTheirActiveShareForFlops) {
  const auto shape = plan::ModelShape::of_config(models::from_scratch_config("mixtral", "8x7B"), "mixtral 8x7B");
  EXPECT_EQ(shape.parameter_count(), 46702792704);
  EXPECT_DOUBLE_EQ(shape.expert_share, 0.25);
  EXPECT_EQ(shape.skipped_projection_params, 0);
  const double experts = 32.0 * 8 * 3 * 4096 * 14336, embedding = 32000.0 * 4096, norms = (2.0 * 32 + 1) * 4096;
  const double active = static_cast<double>(shape.parameter_count()) - 0.75 * experts;
  EXPECT_NEAR(active, 12.88e9, 0.01e9);  // Mixtral's published 12.9B active parameters
  const int64_t seq = 4096;
  const double attention = 12.0 * 32 * 4096 * seq;
  EXPECT_DOUBLE_EQ(plan::model_flops_per_token(shape, seq) - attention, 6.0 * (active - embedding - norms));
}

}  // namespace
}  // namespace fsdpp
