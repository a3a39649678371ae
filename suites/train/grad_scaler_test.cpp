// The sharded grad scaler follows torch.cuda.amp.GradScaler and FSDP's ShardedGradScaler:
// an overflow on any rank makes every rank skip that optimizer step and back the scale
// off; clean steps grow it every growth_interval; unscaled gradients are the gradients of
// the unscaled loss (bitwise for a power-of-two scale); fp16 gradients are checked and
// unscaled in fp32; its state round-trips and malformed state is rejected by name.
#include "core/optim/grad_scaler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/fsdp/sharded_model.h"
#include "core/runtime/capabilities.h"
#include "harness/equiv/equivalence.h"
#include "harness/testing/equivalence_check.h"
#include "harness/testing/multirank.h"

namespace fsdpp::optim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

GradScalerOptions scaler_options(double init_scale, int64_t growth_interval) {
  GradScalerOptions o;
  o.init_scale = init_scale;
  o.growth_interval = growth_interval;
  return o;
}

// A leaf of the given values whose .grad is set by hand.
at::Tensor param_with_grad(const at::Tensor& grad) {
  auto p = torch::zeros_like(grad).requires_grad_();
  p.mutable_grad() = grad.clone();
  return p;
}

bool all_finite(const std::vector<at::Tensor>& params) {
  for (const auto& p : params)
    if (p.grad().defined() && !torch::isfinite(p.grad()).all().item<bool>()) return false;
  return true;
}

TEST(ShardedGradScaler, OverflowOnOneRankMakesEveryRankSkipThatStepAndBackOff) {
  // FULL_SHARD toy MLP on 3 ranks, AdamW and clipping after unscale; rank 1 overflows at
  // step 3. The reference trains the same data without a scaler, omitting step 3's
  // optimizer step. Power-of-two scales make scaled-then-unscaled gradients bitwise the
  // unscaled ones, so the parameters must be bitwise equal.
  constexpr int kSteps = 6, kOverflowStep = 3, kOverflowRank = 1;
  harness::expect_ranks_pass(3, [&](harness::RankContext& ctx) {
    auto model = harness::toy_mlp_case();
    auto train = [&](bool with_scaler) {
      auto net = model.build(1);
      auto sharded = fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
      auto params = sharded->parameters();
      torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      ShardedGradScaler scaler(scaler_options(65536.0, 2), &ctx.comm);  // interval 2: growth happens too
      std::vector<double> scales;
      std::vector<int64_t> trackers;
      for (int step = 0; step < kSteps; ++step) {
        opt.zero_grad();
        auto loss = model.loss(*net, model.batch(step, ctx.rank));
        if (!with_scaler) {
          loss.backward();
          sharded->clip_grad_norm(0.5);
          if (step != kOverflowStep) opt.step();
          continue;
        }
        scaler.scale(loss).backward();
        if (step == kOverflowStep && ctx.rank == kOverflowRank) harness::inject_overflow(params);
        const bool locally_finite = all_finite(params);
        const auto all_reduces = ctx.comm.stats().get(comm::CollectiveKind::AllReduce).calls;
        scaler.unscale(params);
        EXPECT_EQ(ctx.comm.stats().get(comm::CollectiveKind::AllReduce).calls - all_reduces, 1)
            << "one all-reduce per unscale";
        sharded->clip_grad_norm(0.5);
        const bool stepped = scaler.step(opt, params);
        if (step == kOverflowStep) {
          EXPECT_EQ(locally_finite, ctx.rank != kOverflowRank) << "only rank 1 overflowed locally";
          EXPECT_TRUE(scaler.found_inf()) << "rank " << ctx.rank;
          EXPECT_FALSE(stepped) << "rank " << ctx.rank;
        } else {
          EXPECT_FALSE(scaler.found_inf()) << "step " << step;
          EXPECT_TRUE(stepped) << "step " << step;
        }
        scaler.update();
        scales.push_back(scaler.current_scale());
        trackers.push_back(scaler.growth_tracker());
      }
      if (with_scaler) {
        // Grows to 2^17 after steps 0-1, halves at the overflow (step 3), grows after 4-5.
        EXPECT_EQ(scales, (std::vector<double>{65536, 131072, 131072, 65536, 65536, 131072}));
        EXPECT_EQ(trackers, (std::vector<int64_t>{1, 0, 1, 0, 1, 0}));
      }
      return sharded->gather_full_parameters();
    };
    auto scaled = train(true);
    auto reference = train(false);
    ASSERT_EQ(scaled.size(), reference.size());
    for (size_t i = 0; i < scaled.size(); ++i) {
      ASSERT_EQ(scaled[i].first, reference[i].first);
      EXPECT_TRUE(torch::equal(scaled[i].second, reference[i].second)) << scaled[i].first;
    }
  });
}

TEST(ShardedGradScaler, Fp16FullShardTransformerSkipsAnOverflowOnOneRankBitwiseWithTheReference) {
  // A real fp16 run: the tiny transformer under FULL_SHARD on 2 ranks, fp16 compute and
  // fp32 reduce (FSDP2's MixedPrecisionPolicy(param_dtype=float16, reduce_dtype=float32)),
  // AdamW, deterministic mode, PyTorch's default initial scale 2^16. Rank 1 overflows at
  // step 3. The reference is the unsharded cast-emulating model with GradScaler's rules
  // written out in plain LibTorch (its own inf check), told that step 3 overflowed.
  // At 2^16 this model's fp16 gradients also overflow by themselves in early steps (on
  // this machine: steps 0 and 2); both sides must find those too. No clipping: its
  // coefficient comes from a norm summed in another order on each side, so it is not
  // bitwise (the toy test above clips).
  if (!runtime::cpu_has_fp16_kernels()) GTEST_SKIP() << "this LibTorch has no fp16 CPU kernels";
  constexpr int kSteps = 8, kOverflowStep = 3;
  harness::EquivConfig c;
  c.fsdp.strategy = fsdp::ShardingStrategy::FullShard;
  c.fsdp.mixed_precision.param_dtype = at::kHalf;
  c.fsdp.mixed_precision.reduce_dtype = at::kFloat;
  c.deterministic = true;
  c.steps = kSteps;
  c.compare_full_at = {0, kOverflowStep, kSteps - 1};  // at the injected step the parameters only
  c.loss_scaling.enabled = true;
  c.loss_scaling.init_scale = 65536.0;
  c.loss_scaling.growth_interval = 2;  // growth happens too
  c.loss_scaling.overflow_step = kOverflowStep;
  c.loss_scaling.overflow_rank = 1;
  harness::expect_equivalent(
      2, [] { return harness::equiv_case("tiny_transformer"); }, c,
      [&](const harness::EquivReport& r) {
        ASSERT_EQ(r.steps.size(), static_cast<size_t>(kSteps));
        // Rank 0 found no inf of its own at step 3, yet skipped it.
        EXPECT_FALSE(r.steps[kOverflowStep].stepped);
        // The scale each step used follows GradScaler's rule from 2^16.
        double expected = 65536.0;
        int clean = 0, stepped = 0;
        for (const auto& s : r.steps) {
          EXPECT_EQ(s.loss_scale, expected) << "step " << s.step;
          stepped += s.stepped;
          if (!s.stepped) {
            expected /= 2, clean = 0;
          } else if (++clean == 2) {
            expected *= 2, clean = 0;
          }
        }
        EXPECT_GE(stepped, kSteps / 2) << "enough optimizer steps to compare";
        int params_at_skip = 0;
        for (const auto& t : r.tensors)
          params_at_skip += t.kind == "param" && t.step == kOverflowStep && t.bitwise_equal;
        EXPECT_GT(params_at_skip, 0);
        std::printf("%s", r.table().c_str());
      });
}

TEST(ShardedGradScaler, ScaleDoublesAfterGrowthIntervalCleanStepsAndHalvesOnOverflow) {
  auto p = param_with_grad(torch::ones({3}));
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.0));
  ShardedGradScaler scaler(scaler_options(8.0, 3), nullptr);
  std::vector<double> scales;
  std::vector<int64_t> trackers;
  for (float g : {1.f, 1.f, 1.f, 1.f, kInf, 1.f, 1.f, 1.f}) {
    p.mutable_grad() = torch::full({3}, g);
    scaler.step(opt, {p});
    scaler.update();
    scales.push_back(scaler.current_scale());
    trackers.push_back(scaler.growth_tracker());
  }
  EXPECT_EQ(scales, (std::vector<double>{8, 8, 16, 16, 8, 8, 8, 16}));
  EXPECT_EQ(trackers, (std::vector<int64_t>{1, 2, 0, 1, 0, 1, 2, 0}));
}

TEST(ShardedGradScaler, GrowthPastFp32sRangeKeepsTheScale) {
  // As _amp_update_scale_: a grown scale that is not finite is dropped, the tracker resets.
  auto p = param_with_grad(torch::ones({1}));
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.0));
  ShardedGradScaler scaler(scaler_options(std::ldexp(1.0, 127), 1), nullptr);
  scaler.step(opt, {p});
  scaler.update();
  EXPECT_EQ(scaler.current_scale(), std::ldexp(1.0, 127));
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(ShardedGradScaler, UnscaledGradsAreTheUnscaledLossGradsBitwiseForPowerOfTwoScales) {
  // Multiplying by 2^k and 2^-k is exact in fp32 without overflow or underflow, and every
  // backward op commutes with it; any other scale rounds, within a few fp32 ulps.
  auto model = harness::toy_mlp_case();
  auto net = model.build(1);
  auto batch = model.batch(0, 0);
  auto grads_of = [&](ShardedGradScaler* scaler) {
    net->zero_grad();
    auto loss = model.loss(*net, batch);
    (scaler ? scaler->scale(loss) : loss).backward();
    auto params = net->parameters();
    if (scaler) scaler->unscale(params);
    std::vector<at::Tensor> grads;
    grads.reserve(params.size());
    for (auto& p : params) grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    return grads;
  };
  auto reference = grads_of(nullptr);
  ShardedGradScaler power_of_two(scaler_options(std::ldexp(1.0, 20), 2000), nullptr);
  ShardedGradScaler other(scaler_options(3000.0, 2000), nullptr);
  auto exact = grads_of(&power_of_two), rounded = grads_of(&other);
  int compared = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (!reference[i].defined()) continue;
    ++compared;
    EXPECT_TRUE(torch::equal(exact[i], reference[i])) << "parameter " << i;
    EXPECT_TRUE(torch::allclose(rounded[i], reference[i], 1e-5, 1e-7)) << "parameter " << i;
  }
  EXPECT_GT(compared, 0);
}

TEST(ShardedGradScaler, Fp16GradsOverflowingAtRealisticScalesAreDetectedUntilTheScaleFits) {
  // fp16 weights, fp32 loss: the weight's gradient is scale * x rounded to fp16, whose
  // largest finite value is 65504. With x up to 4 the scale backs off from 2^16 to 2^13.
  auto w = torch::full({4}, 0.5, torch::kHalf).requires_grad_();
  auto x = torch::tensor({0.5f, 1.f, 2.f, 4.f});
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.25));
  ShardedGradScaler scaler(GradScalerOptions{}, nullptr);
  std::vector<double> scales_used;
  std::vector<bool> stepped;
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    auto loss = (w.to(torch::kFloat) * x).sum();
    scaler.scale(loss).backward();
    ASSERT_EQ(w.grad().scalar_type(), torch::kHalf);
    scales_used.push_back(scaler.current_scale());
    stepped.push_back(scaler.step(opt, {w}));
    if (!stepped.back()) {
      EXPECT_TRUE(torch::equal(w, torch::full({4}, 0.5, torch::kHalf))) << "a skipped step leaves w alone";
    }
    scaler.update();
  }
  EXPECT_EQ(scales_used, (std::vector<double>{65536, 32768, 16384, 8192}));
  EXPECT_EQ(stepped, (std::vector<bool>{false, false, false, true}));
  EXPECT_TRUE(torch::equal(w.grad().to(torch::kFloat), x)) << "unscaled exactly (power-of-two scale)";
  EXPECT_TRUE(torch::equal(w, (0.5 - 0.25 * x).to(torch::kHalf)));
}

TEST(ShardedGradScaler, Fp16GradsAreUnscaledInFp32) {
  // 1/2^26 is below fp16's smallest subnormal (2^-24): rounding it to fp16 first would give 0.
  auto p = param_with_grad(torch::full({2}, 1024, torch::kHalf));
  ShardedGradScaler scaler(scaler_options(std::ldexp(1.0, 26), 2000), nullptr);
  scaler.unscale({p});
  EXPECT_EQ(p.grad().scalar_type(), torch::kHalf);
  EXPECT_TRUE(torch::equal(p.grad(), torch::full({2}, std::ldexp(1.0, -16), torch::kHalf)));
  EXPECT_FALSE(scaler.found_inf());
}

TEST(ShardedGradScaler, EveryGradDtypeIsUnscaledAndUndefinedGradsAreSkipped) {
  std::vector<at::Tensor> params{
      param_with_grad(torch::full({2}, 48.0, torch::kDouble)), param_with_grad(torch::full({3}, 48.0, torch::kFloat)),
      param_with_grad(torch::full({1}, 48.0, torch::kBFloat16)), torch::zeros({4}, torch::requires_grad())};
  ShardedGradScaler scaler(scaler_options(16.0, 2000), nullptr);
  scaler.unscale(params);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(params[i].grad(), torch::full_like(params[i], 3.0))) << i;
  EXPECT_FALSE(params[3].grad().defined());
  EXPECT_FALSE(scaler.found_inf());
}

TEST(ShardedGradScaler, NanCountsAsAnOverflow) {
  auto p = param_with_grad(torch::tensor({1.f, std::nanf("")}));
  ShardedGradScaler scaler(GradScalerOptions{}, nullptr);
  scaler.unscale({p});
  EXPECT_TRUE(scaler.found_inf());
}

TEST(ShardedGradScaler, ScaleMultipliesTheLossAndKeepsItsDtype) {
  ShardedGradScaler scaler(scaler_options(1024.0, 2000), nullptr);
  auto scaled = scaler.scale(torch::tensor(0.375f));
  EXPECT_EQ(scaled.item<float>(), 384.0f);
  auto scaled_half = scaler.scale(torch::tensor(0.5, torch::kHalf));
  EXPECT_EQ(scaled_half.scalar_type(), torch::kHalf);
  EXPECT_EQ(scaled_half.item<float>(), 512.0f);
}

TEST(ShardedGradScaler, DisabledScalerIsAPassThrough) {
  GradScalerOptions o;
  o.enabled = false;
  ShardedGradScaler scaler(o, nullptr);
  auto loss = torch::tensor(3.0f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  auto p = param_with_grad(torch::tensor({2.f, kInf}));
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.5));
  scaler.unscale({p});
  scaler.unscale({p});  // no stage checks either
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({2.f, kInf})));
  EXPECT_FALSE(scaler.found_inf());
  EXPECT_TRUE(scaler.step(opt, {p})) << "no inf check: the optimizer always steps";
  EXPECT_TRUE(torch::equal(p, torch::tensor({-1.f, -kInf})));
  scaler.update();
  EXPECT_EQ(scaler.current_scale(), 1.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(ShardedGradScaler, CallsOutOfOrderAreErrors) {
  auto p = param_with_grad(torch::ones({1}));
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.0));
  ShardedGradScaler scaler(GradScalerOptions{}, nullptr);
  EXPECT_THROW(scaler.update(), std::logic_error) << "update() before any inf check";
  scaler.unscale({p});
  EXPECT_THAT(error_of([&] { scaler.unscale({p}); }), ::testing::HasSubstr("unscale() was already called"));
  EXPECT_TRUE(torch::equal(p.grad(), torch::full({1}, 1.0 / 65536))) << "the second call changed nothing";
  scaler.step(opt, {p});
  EXPECT_THROW(scaler.step(opt, {p}), std::logic_error);
  EXPECT_THROW(scaler.unscale({p}), std::logic_error);
  scaler.update();
  EXPECT_NO_THROW(scaler.unscale({p})) << "update() starts the next step";
}

TEST(ShardedGradScaler, InvalidOptionsAreRejectedByName) {
  auto error_for = [](auto&& edit) {
    GradScalerOptions o;
    edit(o);
    return error_of([&] { ShardedGradScaler scaler(o, nullptr); });
  };
  using ::testing::HasSubstr;
  EXPECT_THAT(error_for([](GradScalerOptions& o) { o.growth_factor = 1.0; }), HasSubstr("growth_factor 1.0"));
  EXPECT_THAT(error_for([](GradScalerOptions& o) { o.backoff_factor = 1.5; }), HasSubstr("backoff_factor 1.5"));
  EXPECT_THAT(error_for([](GradScalerOptions& o) { o.growth_interval = 0; }), HasSubstr("growth_interval 0"));
  EXPECT_THAT(error_for([](GradScalerOptions& o) { o.init_scale = 1e39; }), HasSubstr("init_scale")) << "beyond fp32";
}

// A scaler with history: scale 512 (grown once from 256, backed off twice), tracker 2.
ShardedGradScaler scaler_with_history() {
  ShardedGradScaler scaler(GradScalerOptions{1024.0, 2.0, 0.5, 5, true}, nullptr);
  auto p = param_with_grad(torch::ones({1}));
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.0));
  for (float g : {kInf, kInf, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f}) {
    p.mutable_grad() = torch::full({1}, g);
    scaler.step(opt, {p});
    scaler.update();
  }
  return scaler;
}

TEST(ShardedGradScaler, StateRoundTripsThroughJsonText) {
  auto saved = scaler_with_history();
  ASSERT_EQ(saved.current_scale(), 512.0);
  ASSERT_EQ(saved.growth_tracker(), 2);
  auto state = nlohmann::json::parse(saved.state().dump());
  EXPECT_EQ(state["format"], "fsdpp.grad-scaler");
  EXPECT_EQ(state["version"], 1);

  ShardedGradScaler restored(GradScalerOptions{}, nullptr);
  restored.load_state(state);
  EXPECT_EQ(restored.current_scale(), 512.0);
  EXPECT_EQ(restored.growth_tracker(), 2);
  EXPECT_EQ(restored.options().growth_interval, 5) << "options come from the state, as load_state_dict";
  EXPECT_EQ(restored.state(), saved.state());
}

// The ends of growth_tracker's range [0, growth_interval) load: 0 (a fresh scaler's, or one
// just after a growth or a backoff) and growth_interval - 1 (one clean step from growing).
TEST(ShardedGradScaler, StatesAtBothEndsOfTheGrowthTrackersRangeLoad) {
  for (int64_t tracker : {int64_t{0}, int64_t{4}}) {
    auto state = scaler_with_history().state();
    state["growth_tracker"] = tracker;
    ShardedGradScaler restored(GradScalerOptions{}, nullptr);
    restored.load_state(state);
    EXPECT_EQ(restored.growth_tracker(), tracker);
  }
}

// found_inf() is the inf check of the step in progress: update() ends that step, so after an
// overflow's update it reads false until the next unscale.
TEST(ShardedGradScaler, UpdateClearsTheFoundInfOfTheStepItEnds) {
  ShardedGradScaler scaler(GradScalerOptions{}, nullptr);
  auto p = torch::zeros({2}, torch::requires_grad());
  p.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity()});
  scaler.unscale({p});
  ASSERT_TRUE(scaler.found_inf());
  scaler.update();
  EXPECT_FALSE(scaler.found_inf());
}

TEST(ShardedGradScaler, MalformedStateIsRejectedNamingWhatIsWrong) {
  const auto good = scaler_with_history().state();
  auto with = [&](auto&& edit) {
    auto j = good;
    edit(j);
    return j;
  };
  using Json = nlohmann::json;
  const std::vector<std::pair<Json, std::string>> cases = {
      {with([](Json& j) { j.erase("scale"); }), "missing key 'scale'"},
      {with([](Json& j) { j.erase("growth_tracker"); }), "missing key 'growth_tracker'"},
      {with([](Json& j) { j["version"] = 2; }), "version 2 is not supported"},
      {with([](Json& j) { j["format"] = "fsdpp.checkpoint"; }), "format 'fsdpp.checkpoint'"},
      {with([](Json& j) { j["loss_scale"] = 1.0; }), "unknown key 'loss_scale'"},
      {with([](Json& j) { j["scale"] = "512"; }), "key 'scale' is a string"},
      {with([](Json& j) { j["scale"] = -1.0; }), "scale -1"},
      {with([](Json& j) { j["scale"] = 0.1; }), "not an fp32 value"},
      {with([](Json& j) { j["growth_tracker"] = 5; }), "growth_tracker 5"},
      {with([](Json& j) { j["backoff_factor"] = 0.0; }), "backoff_factor"},
      {with([](Json& j) { j["enabled"] = false; }), "disabled"},
      {Json::array(), "expected an object"},
  };
  ShardedGradScaler target(GradScalerOptions{}, nullptr);
  for (const auto& entry : cases) {
    const Json& state = entry.first;  // a lambda cannot capture a structured binding in C++17
    EXPECT_THAT(error_of([&] { target.load_state(state); }), ::testing::HasSubstr(entry.second)) << state.dump();
    EXPECT_EQ(target.current_scale(), 65536.0) << "a rejected state changes nothing";
  }
}

}  // namespace
}  // namespace fsdpp::optim
