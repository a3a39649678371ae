// Deferred initialisation: a model built on the meta device gets its values while it is
// sharded, each rank materialising only its own rows (seed-deterministic init, or rows of
// a safetensors checkpoint), or from rank 0 unit by unit (sync_module_states). The shards
// equal those of a full initialisation, and a rank's peak memory stays near one shard.
#include "core/nn/deferred_init.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>

#include "core/fsdp/sharded_model.h"
#include "core/fsdp/sharding.h"
#include "core/models/hf_checkpoint.h"
#include "core/models/llama.h"
#include "core/models/presets.h"
#include "harness/equiv/equivalence.h"
#include "harness/testing/multirank.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp {
namespace {

using fsdp::ShardingStrategy;

std::map<std::string, at::Tensor> shards_of(const fsdp::ShardedModel& sharded) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : sharded.named_parameters()) out[name] = t;
  return out;
}

void expect_same_shards(const fsdp::ShardedModel& actual, const fsdp::ShardedModel& expected) {
  auto a = shards_of(actual), e = shards_of(expected);
  ASSERT_EQ(a.size(), e.size());
  for (const auto& [name, t] : e) {
    ASSERT_TRUE(a.count(name)) << name;
    EXPECT_EQ(a[name].scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(a[name], t)) << name;
  }
}

fsdp::FsdpOptions options_for(ShardingStrategy strategy) {
  fsdp::FsdpOptions o;
  o.strategy = strategy;
  return o;
}

// (family, world, strategy)
using InitCase = std::tuple<std::string, int, ShardingStrategy>;
class DeferredInit : public ::testing::TestWithParam<InitCase> {};

TEST_P(DeferredInit, PerRankRowsFromTheSeedEqualTheShardsOfAFullInit) {
  auto [family, world, strategy] = GetParam();
  harness::expect_ranks_pass(world, [family = family, strategy = strategy](harness::RankContext& ctx) {
    auto config = models::from_scratch_config(family, "tiny", 97);
    auto full = models::build_causal_lm(config, "tiny");
    models::init_from_scratch(full, 11);
    auto expected = fsdp::ShardedModel::create(full.module, ctx.comm, options_for(strategy),
                                               fsdp::wrap_by_module_type({full.block_type}));
    models::CausalLm lm;
    {
      nn::DeferredInit deferred;
      lm = models::build_causal_lm(config, "tiny");
    }
    for (const auto& p : lm.module->parameters()) ASSERT_TRUE(p.is_meta());
    auto o = options_for(strategy);
    o.materialize = [](const std::string& name, const std::vector<int64_t>& shape, int64_t first, at::Tensor out) {
      models::init_rows(name, shape, 11, first, out);
    };
    auto sharded = fsdp::ShardedModel::create(lm.module, ctx.comm, o, fsdp::wrap_by_module_type({lm.block_type}));
    expect_same_shards(*sharded, *expected);
    for (const auto& p : lm.module->parameters()) EXPECT_FALSE(p.is_meta());
    // And it trains: one step runs through every unit.
    auto tokens = torch::randint(0, 97, {2, 8});
    lm.logits(tokens).sum().backward();
  });
}

INSTANTIATE_TEST_SUITE_P(Families, DeferredInit,
                         ::testing::Values(InitCase{"gpt2", 2, ShardingStrategy::FullShard},
                                           InitCase{"opt", 3, ShardingStrategy::FullShard},
                                           InitCase{"llama", 2, ShardingStrategy::ShardGradOp},
                                           InitCase{"gpt2", 2, ShardingStrategy::NoShard},
                                           InitCase{"llama", 4, ShardingStrategy::HybridShard},
                                           InitCase{"gpt2", 1, ShardingStrategy::FullShard}),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_N" + std::to_string(std::get<1>(info.param)) + "_" +
                                  fsdp::to_string(std::get<2>(info.param));
                         });

TEST(DeferredInitFromCheckpoint, EachRankReadsOnlyItsRowsAndGetsTheLoadedModelsShards) {
  harness::TempDir dir;
  {
    torch::manual_seed(3);
    auto lm = models::build_causal_lm(models::from_scratch_config("gpt2", "tiny", 97), "tiny");
    models::save_pretrained(lm, dir.path(), /*max_shard_bytes=*/200'000);  // several shards
  }
  const auto folder = dir.path();
  harness::expect_ranks_pass(3, [folder](harness::RankContext& ctx) {
    auto loaded = models::load_pretrained(folder);
    auto expected =
        fsdp::ShardedModel::create(loaded.module, ctx.comm, {}, fsdp::wrap_by_module_type({loaded.block_type}));
    auto rows = std::make_shared<models::PretrainedRows>(models::PretrainedRows::open(folder));
    models::CausalLm lm;
    {
      nn::DeferredInit deferred;
      lm = models::build_causal_lm(loaded.config, folder.string());
    }
    fsdp::FsdpOptions o;
    // Every read asks for this rank's rows of its 3-way shard, and nothing else.
    int64_t elements_read = 0;
    const int rank = ctx.rank;
    o.materialize = [rows, rank, &elements_read](const std::string& name, const std::vector<int64_t>& shape,
                                                 int64_t first, at::Tensor out) {
      const auto layout = fsdp::ShardLayout::of(shape, 3);
      EXPECT_EQ(first, layout.first_row(rank)) << name;
      EXPECT_EQ(out.size(0), layout.valid_rows(rank)) << name;
      elements_read += out.numel();
      rows->read(name, shape, first, out);
    };
    auto sharded = fsdp::ShardedModel::create(lm.module, ctx.comm, o, fsdp::wrap_by_module_type({lm.block_type}));
    expect_same_shards(*sharded, *expected);
    int64_t shard_elements = 0;
    for (const auto& [name, t] : sharded->named_parameters()) shard_elements += t.numel();
    EXPECT_GT(elements_read, 0);
    EXPECT_EQ(elements_read, shard_elements);  // each row of the shard read once
  });
}

TEST(SyncModuleStates, Rank0sValuesReachEveryRankEvenFromMetaTensors) {
  harness::expect_ranks_pass(3, [](harness::RankContext& ctx) {
    auto model = harness::equiv_case("tiny_transformer");
    auto reference = model.build(1);  // what rank 0 holds
    auto net = model.build(ctx.rank == 0 ? 1 : 2);
    if (ctx.rank == 2)  // a rank that never materialised anything
      for (auto& p : net->parameters())
        nn::set_data_across_devices(p, at::empty(p.sizes(), p.options().device(at::kMeta)));
    fsdp::FsdpOptions o;
    o.sync_module_states = true;
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, o, model.wrap);
    auto expected = reference->named_parameters(true);
    for (const auto& [name, value] : sharded->gather_full_parameters())
      EXPECT_TRUE(torch::equal(value, expected[name])) << name;
  });
}

TEST(DeferredInitErrors, AMetaParameterWithoutASourceIsNamed) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::equiv_case("toy_mlp");
    auto net = model.build(1);
    for (auto& p : net->parameters())
      nn::set_data_across_devices(p, at::empty(p.sizes(), p.options().device(at::kMeta)));
    try {
      fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
      ADD_FAILURE() << "expected an error";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("meta device"), std::string::npos) << message;
      bool names_a_parameter = false;  // which one is met first is not specified
      for (const auto& item : net->named_parameters())
        names_a_parameter |= message.find("parameter '" + item.key() + "'") != std::string::npos;
      EXPECT_TRUE(names_a_parameter) << message;
    }
  });
}

// /proc/self/status fields in bytes; writing 5 to clear_refs resets VmHWM (peak RSS) to
// the current RSS (Linux >= 4.0), so the peak of one phase can be read.
int64_t status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size())) * 1024;
  return -1;
}

TEST(DeferredInitMemory, A100MParameterModelOn4RanksPeaksBelow40PercentOfItsBytesPerRank) {
  harness::expect_ranks_pass(4, [](harness::RankContext& ctx) {
    const auto config = models::from_scratch_config("llama", "125M");
    const int64_t model_bytes = models::llama_preset("125M").parameter_count() * 4;
    ASSERT_GE(model_bytes, 400'000'000);  // >= 100 M fp32 parameters
    { std::ofstream("/proc/self/clear_refs") << "5"; }
    const int64_t rss_before = status_bytes("VmRSS:");
    models::CausalLm lm;
    {
      nn::DeferredInit deferred;
      lm = models::build_causal_lm(config, "125M");
    }
    fsdp::FsdpOptions o;
    o.materialize = [](const std::string& name, const std::vector<int64_t>& shape, int64_t first, at::Tensor out) {
      models::init_rows(name, shape, 5, first, out);
    };
    auto sharded = fsdp::ShardedModel::create(lm.module, ctx.comm, o, fsdp::wrap_by_module_type({lm.block_type}));
    const int64_t peak_growth = status_bytes("VmHWM:") - rss_before;
    const auto memory = sharded->memory();
    std::printf("rank %d: setup peak RSS growth %.1f MB = %.1f%% of the model's %.1f MB (shard %.1f MB)\n", ctx.rank,
                peak_growth / 1e6, 100.0 * peak_growth / model_bytes, model_bytes / 1e6, memory.shard_bytes / 1e6);
    EXPECT_GT(peak_growth, memory.shard_bytes / 2);  // the measurement sees the shard being made
    EXPECT_LT(peak_growth, 0.4 * model_bytes);
    // The same shards as a full initialisation of the whole model on every rank.
    auto full = models::build_causal_lm(config, "125M");
    models::init_from_scratch(full, 5);
    auto expected = fsdp::ShardedModel::create(full.module, ctx.comm, {}, fsdp::wrap_by_module_type({full.block_type}));
    expect_same_shards(*sharded, *expected);
  });
}

}  // namespace
}  // namespace fsdpp
