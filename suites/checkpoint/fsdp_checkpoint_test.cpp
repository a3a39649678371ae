// A real sharded model and its AdamW state, saved by 4 FULL_SHARD ranks, load into any
// rank count and strategy with every parameter and every optimizer state bit for bit;
// on the same mesh, training then continues exactly as if it had never stopped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <sstream>
#include <type_traits>

#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/checkpoint_scan.h"
#include "core/checkpoint/fsdp_state.h"
#include "core/io/safetensors.h"
#include "harness/equiv/equivalence.h"
#include "harness/testing/multirank.h"
#include "harness/testing/temp_dir.h"
#include "suites/checkpoint/checkpoint_fixtures.h"

namespace fsdpp::checkpoint {
namespace {

namespace fs = std::filesystem;
using fsdp::ShardingStrategy;
using testing::bitwise_equal;

constexpr int kSavedSteps = 3;

std::unique_ptr<torch::optim::AdamW> make_optimizer(fsdp::ShardedModel& m) {
  return std::make_unique<torch::optim::AdamW>(m.parameters(), torch::optim::AdamWOptions(1e-2));
}

void train_step(const harness::EquivModel& model, torch::nn::Module& net, torch::optim::AdamW& opt, int step,
                int rank) {
  opt.zero_grad();
  model.loss(net, model.batch(step, rank)).backward();
  opt.step();
}

template <typename Map>
typename Map::key_type key_of(const Map&, const at::Tensor& t) {
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    std::ostringstream s;
    s << t.unsafeGetTensorImpl();
    return s.str();
  } else {
    return t.unsafeGetTensorImpl();
  }
}

// Full AdamW state of every parameter that has one, all-gathered from the shards over
// each unit's shard group (from the shard layout alone, not through the checkpoint code).
struct FullOptimizerState {
  std::map<std::string, at::Tensor> exp_avg, exp_avg_sq;
  std::map<std::string, int64_t> step;
};

FullOptimizerState gather_optimizer_state(fsdp::ShardedModel& m, torch::optim::AdamW& opt) {
  FullOptimizerState out;
  auto& states = opt.state();
  for (const auto& unit : m.units()) {
    auto& group = *unit->comms().shard;
    for (auto& p : unit->params()) {
      auto it = states.find(key_of(states, p.sharded()));
      const torch::optim::AdamWParamState* s =
          it == states.end() ? nullptr : static_cast<const torch::optim::AdamWParamState*>(it->second.get());
      auto holders = torch::full({1}, s ? 1 : 0, at::kLong);
      group.all_reduce(holders, comm::ReduceOp::Sum);
      const auto& l = p.layout();
      auto gather = [&](const at::Tensor& shard) {
        auto padded = torch::zeros({l.shard_numel()});
        if (s) padded.narrow(0, 0, shard.numel()).copy_(shard.reshape({-1}));
        auto all = torch::empty({l.shard_numel() * group.size()});
        group.all_gather_into(all, padded);
        return all.view({-1, l.row_numel}).narrow(0, 0, l.dim0).reshape(p.shape());
      };
      auto exp_avg = gather(s ? s->exp_avg() : at::Tensor());
      auto exp_avg_sq = gather(s ? s->exp_avg_sq() : at::Tensor());
      if (holders.item<int64_t>() == 0) continue;
      EXPECT_EQ(holders.item<int64_t>(), group.size()) << p.name() << ": AdamW state on some ranks only";
      out.exp_avg[p.name()] = exp_avg;
      out.exp_avg_sq[p.name()] = exp_avg_sq;
      if (s) out.step[p.name()] = s->step();
    }
  }
  return out;
}

// Every full parameter and optimizer state of `m` equals the checkpoint's, bit for bit.
void expect_model_equals_checkpoint(const CheckpointReader& reader, fsdp::ShardedModel& m, torch::optim::AdamW& opt) {
  const auto params = m.gather_full_parameters();
  size_t saved_params = 0;
  for (const auto& [name, entry] : reader.index().tensors) saved_params += name.rfind("model/", 0) == 0;
  EXPECT_EQ(params.size(), saved_params);  // every parameter, none missed
  for (const auto& [name, full] : params) EXPECT_TRUE(bitwise_equal(full, reader.read("model/" + name))) << name;
  auto state = gather_optimizer_state(m, opt);
  int with_state = 0;
  for (const auto& [name, entry] : reader.index().tensors) {
    if (name.rfind("optim/", 0) != 0 || name.size() < 8 || name.substr(name.size() - 8) != "/exp_avg") continue;
    const std::string param = name.substr(6, name.size() - 6 - 8);
    ++with_state;
    ASSERT_TRUE(state.exp_avg.count(param)) << param << " has no AdamW state after loading";
    EXPECT_TRUE(bitwise_equal(state.exp_avg[param], reader.read(name))) << name;
    EXPECT_TRUE(bitwise_equal(state.exp_avg_sq[param], reader.read("optim/" + param + "/exp_avg_sq"))) << param;
    if (state.step.count(param)) {
      EXPECT_EQ(state.step[param], reader.index().optimizer["step"][param].get<int64_t>()) << param;
    }
  }
  EXPECT_EQ(with_state, static_cast<int>(state.exp_avg.size()));
  EXPECT_GT(with_state, 0);
}

// Saved once for the whole suite by 4 FULL_SHARD ranks after kSavedSteps steps; the
// ranks then take one more step and keep the parameters as `after_next_step`.
struct Saved {
  harness::TempDir tmp{"ckpt-fsdp"};
  fs::path checkpoint = tmp / "checkpoints" / step_dir_name(kSavedSteps);
  fs::path after_next_step = tmp / "after_next_step.safetensors";
};

const Saved& saved() {
  static Saved s;
  static bool done = [] {
    Saved* saved = &s;
    harness::expect_ranks_pass(4, [saved](harness::RankContext& ctx) {
      auto model = harness::toy_mlp_case();
      auto net = model.build(1);
      auto sharded = fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
      auto opt = make_optimizer(*sharded);
      for (int step = 0; step < kSavedSteps; ++step) train_step(model, *net, *opt, step, ctx.rank);
      save_checkpoint(ctx.comm, saved->checkpoint, sharded_state(*sharded, opt.get()), {{"step", kSavedSteps}});
      expect_model_equals_checkpoint(load_checkpoint(saved->checkpoint), *sharded, *opt);

      train_step(model, *net, *opt, kSavedSteps, ctx.rank);
      auto full = sharded->gather_full_parameters();
      if (ctx.rank == 0) io::write_safetensors(saved->after_next_step, {full.begin(), full.end()});
    });
    return true;
  }();
  (void)done;
  return s;
}

struct Target {
  int ranks;
  ShardingStrategy strategy;
  int hybrid_shard_size;
};

void PrintTo(const Target& t, std::ostream* os) { *os << t.ranks << " ranks, " << fsdp::to_string(t.strategy); }

class LoadInto : public ::testing::TestWithParam<Target> {};

TEST_P(LoadInto, EveryParameterAndAdamWStateEqualsTheSavedOneBitwise) {
  const fs::path checkpoint = saved().checkpoint;
  const Target target = GetParam();
  harness::expect_ranks_pass(target.ranks, [&](harness::RankContext& ctx) {
    auto model = harness::toy_mlp_case();
    auto net = model.build(99);  // other weights: all of them must come from the checkpoint
    fsdp::FsdpOptions options;
    options.strategy = target.strategy;
    options.hybrid_shard_size = target.hybrid_shard_size;
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, options, model.wrap);
    auto opt = make_optimizer(*sharded);
    auto reader = load_checkpoint(checkpoint);
    restore_sharded_state(reader, *sharded, opt.get());
    expect_model_equals_checkpoint(reader, *sharded, *opt);
    EXPECT_EQ(reader.train_state(), nlohmann::json({{"step", kSavedSteps}}));
    train_step(model, *net, *opt, kSavedSteps, ctx.rank);  // the restored state trains
  });
}

INSTANTIATE_TEST_SUITE_P(
    FromFourFullShardRanks, LoadInto,
    ::testing::Values(Target{1, ShardingStrategy::FullShard, 0}, Target{2, ShardingStrategy::FullShard, 0},
                      Target{3, ShardingStrategy::FullShard, 0}, Target{2, ShardingStrategy::NoShard, 0},
                      Target{4, ShardingStrategy::HybridShard, 2}),
    [](const auto& info) { return fsdp::to_string(info.param.strategy) + "_on_" + std::to_string(info.param.ranks); });

// Replicas split their rows between them: saved from NO_SHARD, hybrid or ZeRO-2, the
// checkpoint still holds each row once and equals the model.
class SaveFrom : public ::testing::TestWithParam<Target> {};

TEST_P(SaveFrom, TheCheckpointHoldsExactlyTheTrainedState) {
  const Target source = GetParam();
  harness::TempDir tmp("ckpt-save-from");
  const fs::path checkpoint = tmp / step_dir_name(2);
  harness::expect_ranks_pass(source.ranks, [&](harness::RankContext& ctx) {
    auto model = harness::toy_mlp_case();
    auto net = model.build(1);
    fsdp::FsdpOptions options;
    options.strategy = source.strategy;
    options.hybrid_shard_size = source.hybrid_shard_size;
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, options, model.wrap);
    auto opt = make_optimizer(*sharded);
    for (int step = 0; step < 2; ++step) train_step(model, *net, *opt, step, ctx.rank);
    save_checkpoint(ctx.comm, checkpoint, sharded_state(*sharded, opt.get()), {});
    auto reader = load_checkpoint(checkpoint);
    expect_model_equals_checkpoint(reader, *sharded, *opt);
    EXPECT_EQ(reader.index().mesh.strategy, fsdp::to_string(source.strategy));
    EXPECT_EQ(reader.index().mesh.shard_group_size * reader.index().mesh.replicas, source.ranks);
    EXPECT_EQ(reader.index().files.size(), static_cast<size_t>(source.ranks));  // the writing is spread
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, SaveFrom,
                         ::testing::Values(Target{2, ShardingStrategy::NoShard, 0},
                                           Target{4, ShardingStrategy::HybridShard, 2},
                                           Target{3, ShardingStrategy::ShardGradOp, 0}),
                         [](const auto& info) {
                           return fsdp::to_string(info.param.strategy) + "_on_" + std::to_string(info.param.ranks);
                         });

TEST(ResumeOnTheSameMesh, TheNextStepIsBitwiseTheUninterruptedOne) {
  const Saved& s = saved();
  harness::expect_ranks_pass(4, [&](harness::RankContext& ctx) {
    auto model = harness::toy_mlp_case();
    auto net = model.build(99);
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
    auto opt = make_optimizer(*sharded);
    restore_sharded_state(load_checkpoint(s.checkpoint), *sharded, opt.get());
    train_step(model, *net, *opt, kSavedSteps, ctx.rank);
    auto reference = io::SafetensorsFile::open(s.after_next_step);
    const auto params = sharded->gather_full_parameters();
    EXPECT_EQ(params.size(), reference.names().size());
    for (const auto& [name, full] : params) EXPECT_TRUE(bitwise_equal(full, reference.tensor(name))) << name;
  });
}

// AdamW with amsgrad keeps max_exp_avg_sq: a checkpoint holds it and a restore puts it back,
// so the step after a resume is bitwise the uninterrupted one. beta2 = 0.5 lets exp_avg_sq
// fall below its running maximum, so a maximum that were lost or zeroed would change the step.
TEST(AmsgradCheckpoint, MaxExpAvgSqIsSavedAndRestoredSoTheNextStepIsBitwiseTheUninterruptedOne) {
  harness::TempDir tmp("ckpt-amsgrad");
  const fs::path dir = tmp / "step-000002";
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    auto model = harness::toy_mlp_case();
    auto amsgrad = [](fsdp::ShardedModel& m) {
      return std::make_unique<torch::optim::AdamW>(m.parameters(),
                                                   torch::optim::AdamWOptions(1e-2).betas({0.9, 0.5}).amsgrad(true));
    };
    auto net = model.build(1);
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
    auto opt = amsgrad(*sharded);
    for (int step = 0; step < 2; ++step) train_step(model, *net, *opt, step, ctx.rank);
    save_checkpoint(ctx.comm, dir, sharded_state(*sharded, opt.get()), {});
    train_step(model, *net, *opt, 2, ctx.rank);
    const auto uninterrupted = sharded->gather_full_parameters();

    auto resumed_net = model.build(99);
    auto resumed = fsdp::ShardedModel::create(resumed_net, ctx.comm, {}, model.wrap);
    auto resumed_opt = amsgrad(*resumed);
    const auto reader = load_checkpoint(dir);
    int maxima = 0, second_moments = 0;  // one maximum beside every exp_avg_sq
    for (const auto& [name, entry] : reader.index().tensors) {
      maxima += name.find("/max_exp_avg_sq") != std::string::npos;
      second_moments += name.size() > 11 && name.compare(name.size() - 11, 11, "/exp_avg_sq") == 0;
    }
    EXPECT_GT(second_moments, 0);
    EXPECT_EQ(maxima, second_moments);
    restore_sharded_state(reader, *resumed, resumed_opt.get());
    train_step(model, *resumed_net, *resumed_opt, 2, ctx.rank);
    const auto params = resumed->gather_full_parameters();
    ASSERT_EQ(params.size(), uninterrupted.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(bitwise_equal(params[i].second, uninterrupted[i].second)) << params[i].first;
  });
}

}  // namespace
}  // namespace fsdpp::checkpoint
