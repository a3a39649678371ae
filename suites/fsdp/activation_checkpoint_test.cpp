// Activation checkpointing: the same training bit for bit (fp32, CPU), with and without
// FSDP, for every strategy; marked blocks really recompute in backward (and only there);
// and the activations kept between forward and backward shrink.
#include <gtest/gtest.h>
#include <malloc.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>

#include "core/compat/torch_compat.h"
#include "core/fsdp/activation_checkpointing.h"
#include "core/fsdp/sharded_model.h"
#include "core/models/causal_lm.h"
#include "core/models/layers.h"
#include "core/models/presets.h"
#include "core/models/tiny_transformer.h"
#include "core/nn/gradient_only_linear.h"
#include "core/nn/module_hooks.h"
#include "harness/testing/equivalence_check.h"

namespace fsdpp {
namespace {

using fsdp::CheckpointPolicy;
using fsdp::ShardingStrategy;
using Named = std::vector<std::pair<std::string, torch::Tensor>>;

const std::string kBlock = "fsdpp::models::TinyBlockImpl";

CheckpointPolicy every_kth_block(int k) { return {{kBlock}, k}; }

void expect_bitwise_equal(const Named& expected, const Named& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, e] = expected[i];
    const auto& a = actual[i].second;
    EXPECT_EQ(name, actual[i].first);
    ASSERT_EQ(e.defined(), a.defined()) << name;
    if (e.defined()) {
      EXPECT_TRUE(torch::equal(e, a)) << name << " differs";
    }
  }
}

struct Pass {
  double loss = 0;
  Named grads;
};

// One forward and backward of the unsharded tiny transformer, checkpointed by `ac` if
// given; the forward under bf16 CPU autocast when `autocast` (backward outside it, as a
// training loop does).
Pass forward_backward(const CheckpointPolicy* ac, bool autocast = false) {
  auto model = harness::tiny_transformer_case();
  auto net = model.build(1);
  if (ac != nullptr) fsdp::apply_activation_checkpointing(*net, *ac);
  torch::Tensor loss;
  {
    std::optional<compat::AutocastGuard> scope;
    if (autocast) scope.emplace(compat::AutocastState::only(at::kCPU, at::kBFloat16));
    loss = model.loss(*net, model.batch(0, 0));
  }
  loss.backward();
  Pass out{loss.item<double>(), {}};
  for (const auto& item : net->named_parameters()) out.grads.emplace_back(item.key(), item.value().grad().clone());
  return out;
}

TEST(ActivationCheckpointing, LossAndGradientsAreBitwiseEqualWithoutFsdp) {
  auto plain = forward_backward(nullptr);
  for (int k : {1, 2}) {
    SCOPED_TRACE("every_k " + std::to_string(k));
    auto policy = every_kth_block(k);
    auto checkpointed = forward_backward(&policy);
    EXPECT_EQ(plain.loss, checkpointed.loss);
    expect_bitwise_equal(plain.grads, checkpointed.grads);
  }
  // The root takes token ids (int64, no gradient): its parameters must still get theirs.
  CheckpointPolicy whole_model{{"fsdpp::models::TinyTransformerImpl"}, 1};
  auto root_checkpointed = forward_backward(&whole_model);
  EXPECT_EQ(plain.loss, root_checkpointed.loss);
  expect_bitwise_equal(plain.grads, root_checkpointed.grads);
}

// A mixture of experts' load-balancing loss reads every sparse layer's router logits, which
// a checkpointed layer's first forward computes without a graph: they leave the checkpoint
// as its side outputs (nn::side_output), so the loss and every gradient, the routers'
// included, are bitwise those of the run without checkpointing.
Pass moe_forward_backward(double aux_coef, bool checkpointed) {
  auto config = models::from_scratch_config("qwen3_moe", "tiny");
  config["output_router_logits"] = true;
  config["router_aux_loss_coef"] = aux_coef;
  auto lm = models::build_causal_lm(config, "qwen3_moe");
  models::init_from_scratch(lm, 3);
  if (checkpointed) fsdp::apply_activation_checkpointing(*lm.module, {{lm.block_type}, 1});
  const auto tokens = torch::arange(24, torch::kLong).remainder(lm.vocab_size).reshape({2, 12});
  auto logits = lm.logits(tokens.narrow(1, 0, 11));
  auto loss =
      torch::nn::functional::cross_entropy(logits.reshape({-1, lm.vocab_size}), tokens.narrow(1, 1, 11).reshape({-1})) +
      lm.auxiliary_loss();
  loss.backward();
  Pass out{loss.item<double>(), {}};
  for (const auto& item : lm.module->named_parameters()) {
    const auto& grad = item.value().grad();
    out.grads.emplace_back(item.key(), grad.defined() ? grad.clone() : grad);
  }
  return out;
}

TEST(ActivationCheckpointing, ALoadBalancingLossGetsTheRoutersGradientsThroughTheCheckpointsSideOutputs) {
  auto plain = moe_forward_backward(0.5, false);
  auto checkpointed = moe_forward_backward(0.5, true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  expect_bitwise_equal(plain.grads, checkpointed.grads);
  // The loss does reach the routers: their gradients differ from a zero coefficient's.
  auto without = moe_forward_backward(0.0, false);
  int routers = 0;
  for (size_t i = 0; i < plain.grads.size(); ++i)
    if (plain.grads[i].first.find("mlp.gate.weight") != std::string::npos) {
      ++routers;
      EXPECT_FALSE(torch::equal(plain.grads[i].second, without.grads[i].second)) << plain.grads[i].first;
    }
  EXPECT_EQ(routers, 2);  // the tiny preset's sparse layers: 0 and 2
}

// The recomputation in backward casts as the forward did: under the forward's autocast,
// though backward runs outside it (without that it recomputes in fp32 and the gradients
// come from other activations than the forward's).
TEST(ActivationCheckpointing, RecomputesUnderTheForwardsAutocast) {
  auto plain = forward_backward(nullptr, /*autocast=*/true);
  auto policy = every_kth_block(1);
  auto checkpointed = forward_backward(&policy, /*autocast=*/true);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  expect_bitwise_equal(plain.grads, checkpointed.grads);
  EXPECT_NE(plain.loss, forward_backward(nullptr).loss);  // autocast did change the computation
  EXPECT_FALSE(compat::autocast_state().any());           // and ended with its scope
}

TEST(ActivationCheckpointing, PolicySelectsEveryKthMatchingModuleAndRejectsBadInput) {
  models::TinyTransformerConfig config;
  config.layers = 5;
  auto net = models::TinyTransformer(config);
  EXPECT_EQ(fsdp::apply_activation_checkpointing(*net, every_kth_block(2)),
            (std::vector<std::string>{"blocks.1", "blocks.3"}));
  EXPECT_FALSE(nn::is_checkpointed(net->block_list[0].get()));
  EXPECT_TRUE(nn::is_checkpointed(net->block_list[1].get()));
  fsdp::remove_activation_checkpointing(*net);
  EXPECT_FALSE(nn::is_checkpointed(net->block_list[1].get()));
  EXPECT_EQ(fsdp::apply_activation_checkpointing(*net, every_kth_block(1)).size(), 5u);
  EXPECT_THROW(fsdp::apply_activation_checkpointing(*net, every_kth_block(0)), std::invalid_argument);
  EXPECT_THROW(fsdp::apply_activation_checkpointing(*net, {{"fsdpp::models::NoSuchBlock"}, 1}), std::invalid_argument);
  EXPECT_THROW(fsdp::apply_activation_checkpointing(*net, {{}, 1}), std::invalid_argument);
}

// Counts the forward calls of some modules (through a pre-forward hook) and how many of
// them were recomputations; unhooks on destruction (hooks are keyed by address).
struct CallCounter {
  explicit CallCounter(std::vector<const torch::nn::Module*> modules) : hooked(std::move(modules)) {
    for (auto* module : hooked)
      nn::set_forward_hooks(module, {[this](std::vector<at::Tensor>&) {
                                       ++calls;
                                       recomputed += nn::recomputing();
                                     },
                                     nullptr});
  }
  ~CallCounter() {
    for (auto* module : hooked) nn::clear_forward_hooks(module);
  }
  CallCounter(const CallCounter&) = delete;
  CallCounter& operator=(const CallCounter&) = delete;
  std::vector<const torch::nn::Module*> hooked;
  int calls = 0, recomputed = 0;
};

std::vector<const torch::nn::Module*> blocks_of(models::TinyTransformerImpl& model) {
  std::vector<const torch::nn::Module*> out;
  for (auto& block : model.block_list) out.push_back(block.get());
  return out;
}

// The MLP input layer of every block: called through nn::call, never an FSDP unit here.
std::vector<const torch::nn::Module*> block_fcs_of(models::TinyTransformerImpl& model) {
  std::vector<const torch::nn::Module*> out;
  for (auto& block : model.block_list) out.push_back(block->fc.get());
  return out;
}

TEST(ActivationCheckpointing, MarkedBlocksRecomputeOnceInBackwardAndNeverInEvaluation) {
  auto model = harness::tiny_transformer_case();  // 3 blocks
  auto net = model.build(1);
  auto& transformer = dynamic_cast<models::TinyTransformerImpl&>(*net);
  fsdp::apply_activation_checkpointing(*net, every_kth_block(2));  // blocks.1 only
  CallCounter counter(blocks_of(transformer));
  auto loss = model.loss(*net, model.batch(0, 0));
  EXPECT_EQ(counter.calls, 3);
  loss.backward();
  EXPECT_EQ(counter.calls, 4);
  EXPECT_EQ(counter.recomputed, 1);
  {
    torch::NoGradGuard no_grad;
    model.loss(*net, model.batch(0, 0));
  }
  EXPECT_EQ(counter.calls, 7);
  EXPECT_EQ(counter.recomputed, 1);
}

// ---------------------------------------------------------------- with FSDP

const std::string kWholeModel = "fsdpp::models::TinyTransformerImpl";

struct ShardedCase {
  std::string name;
  int world = 2;
  ShardingStrategy strategy = ShardingStrategy::FullShard;
  CheckpointPolicy policy = every_kth_block(1);
  int recomputed_fc_calls_per_pass = 3;  // of the blocks' fc layers, per forward-backward
  bool no_sync = false;                  // accumulate the micro-steps without reduction
  fsdp::BackwardPrefetch backward_prefetch = fsdp::BackwardPrefetch::Pre;
};

void PrintTo(const ShardedCase& c, std::ostream* os) { *os << c.name; }

struct Trained {
  std::vector<double> losses;
  Named params;
  int64_t all_gathers = 0;
  int recomputed_fc_calls = 0;
  int passes = 0;
};

// Three AdamW steps of two micro-steps each on this rank, blocks wrapped as units.
Trained train_sharded(harness::RankContext& ctx, const ShardedCase& c, bool checkpointed) {
  auto model = harness::tiny_transformer_case();
  auto net = model.build(1);
  if (checkpointed) fsdp::apply_activation_checkpointing(*net, c.policy);
  CallCounter fc_calls(block_fcs_of(dynamic_cast<models::TinyTransformerImpl&>(*net)));
  fsdp::FsdpOptions options;
  options.strategy = c.strategy;
  options.backward_prefetch = c.backward_prefetch;
  auto sharded = fsdp::ShardedModel::create(net, ctx.comm, options, model.wrap);
  torch::optim::AdamW opt(sharded->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  Trained out;
  const int micro_steps = 2;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    for (int k = 0; k < micro_steps; ++k) {
      sharded->set_requires_gradient_sync(!c.no_sync || k == micro_steps - 1);
      auto loss = model.loss(*net, model.batch(step, k * ctx.world_size + ctx.rank));
      out.losses.push_back(loss.item<double>());
      (loss / micro_steps).backward();
      ++out.passes;
    }
    opt.step();
  }
  out.recomputed_fc_calls = fc_calls.recomputed;
  out.all_gathers = sharded->comm_stats(comm::CollectiveKind::AllGather).calls;
  out.params = sharded->gather_full_parameters();
  return out;
}

class ShardedActivationCheckpointing : public ::testing::TestWithParam<ShardedCase> {};

TEST_P(ShardedActivationCheckpointing, TrainingIsBitwiseEqualAndGathersNoMore) {
  const ShardedCase c = GetParam();
  harness::expect_ranks_pass(c.world, [c](harness::RankContext& ctx) {
    auto plain = train_sharded(ctx, c, false);
    auto checkpointed = train_sharded(ctx, c, true);
    EXPECT_EQ(plain.losses, checkpointed.losses);
    expect_bitwise_equal(plain.params, checkpointed.params);
    EXPECT_EQ(plain.recomputed_fc_calls, 0);
    EXPECT_EQ(checkpointed.recomputed_fc_calls, c.recomputed_fc_calls_per_pass * checkpointed.passes);
    // A recomputed unit is gathered once for recomputation and backward together:
    // FULL_SHARD re-gathers for backward anyway, SHARD_GRAD_OP keeps it unsharded.
    EXPECT_EQ(plain.all_gathers, checkpointed.all_gathers);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, ShardedActivationCheckpointing,
    ::testing::Values(
        ShardedCase{"N2_full_shard"},
        ShardedCase{"N2_full_shard_every_2nd_no_sync", 2, ShardingStrategy::FullShard, every_kth_block(2), 1, true},
        ShardedCase{"N2_full_shard_backward_post", 2, ShardingStrategy::FullShard, every_kth_block(1), 3, false,
                    fsdp::BackwardPrefetch::Post},
        // The root unit itself (token ids in), alone and around checkpointed blocks.
        ShardedCase{"N2_full_shard_whole_model", 2, ShardingStrategy::FullShard, {{kWholeModel}, 1}, 3},
        ShardedCase{
            "N2_shard_grad_op_whole_model_and_blocks", 2, ShardingStrategy::ShardGradOp, {{kWholeModel, kBlock}, 1}, 6},
        ShardedCase{"N3_full_shard", 3, ShardingStrategy::FullShard},
        ShardedCase{"N2_shard_grad_op", 2, ShardingStrategy::ShardGradOp},
        ShardedCase{"N2_no_shard_no_sync", 2, ShardingStrategy::NoShard, every_kth_block(1), 3, true},
        ShardedCase{"N4_hybrid_shard", 4, ShardingStrategy::HybridShard},
        ShardedCase{"N4_hybrid_shard_zero2_no_sync", 4, ShardingStrategy::HybridShardZero2, every_kth_block(1), 3,
                    true}),
    [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------- memory

// Heap bytes in use (glibc: small chunks in every arena plus mmapped blocks). LibTorch's
// CPU allocator takes tensors from malloc, so this counts every live tensor.
int64_t heap_bytes_in_use() {
  struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

struct ActivationBytes {
  int64_t after_forward = 0;  // held from the end of forward into backward
  int64_t peak = 0;           // most held at a block boundary, forward and backward
};

// Heap growth over one forward and backward of a wider, longer transformer (batch 8),
// sampled after every block's forward (also its recomputation) and after forward.
ActivationBytes measure_activations(bool checkpointed) {
  models::TinyTransformerConfig config;
  config.dim = 64;
  config.heads = 4;
  config.seq_len = 128;
  config.layers = 6;
  auto model = harness::tiny_transformer_case(config);
  auto net = model.build(1);
  auto& transformer = dynamic_cast<models::TinyTransformerImpl&>(*net);
  if (checkpointed) fsdp::apply_activation_checkpointing(*net, every_kth_block(1));
  auto batch = model.concat({model.batch(0, 0), model.batch(0, 1), model.batch(0, 2), model.batch(0, 3)});
  ActivationBytes out;
  int64_t base = 0;
  auto sample = [&] { out.peak = std::max(out.peak, heap_bytes_in_use() - base); };
  for (auto& block : transformer.block_list)
    nn::set_forward_hooks(block.get(), {nullptr, [&](at::Tensor y) {
                                          sample();
                                          return y;
                                        }});
  base = heap_bytes_in_use();
  auto loss = model.loss(*net, batch);
  out.after_forward = heap_bytes_in_use() - base;
  sample();
  loss.backward();
  for (auto& block : transformer.block_list) nn::clear_forward_hooks(block.get());
  return out;
}

TEST(ActivationCheckpointing, KeepsFarFewerActivationsBetweenForwardAndBackward) {
  measure_activations(false);  // warm-up: thread pools and allocator arenas
  auto plain = measure_activations(false);
  auto checkpointed = measure_activations(true);
  std::printf(
      "activation bytes, tiny transformer d64 h4 s128 L6 batch 8, every block checkpointed:\n"
      "  after forward: %lld without AC, %lld with AC (%.3fx)\n"
      "  peak at block boundaries: %lld without AC, %lld with AC (%.3fx)\n",
      static_cast<long long>(plain.after_forward), static_cast<long long>(checkpointed.after_forward),
      static_cast<double>(checkpointed.after_forward) / static_cast<double>(plain.after_forward),
      static_cast<long long>(plain.peak), static_cast<long long>(checkpointed.peak),
      static_cast<double>(checkpointed.peak) / static_cast<double>(plain.peak));
  // Without AC each block keeps its attention probabilities and MLP activations (tens of
  // times its input); with AC it keeps its input only. In backward AC holds one block's
  // recomputed activations plus the inputs, so with 6 blocks its peak is well under 0.7x.
  EXPECT_LT(checkpointed.after_forward, plain.after_forward / 4);
  EXPECT_LT(checkpointed.peak, plain.peak * 7 / 10);
}

// gradient_only_linear against autograd through the layer it stands for.
struct LinearCase {
  nn::WeightLayout layout;
  bool bias;
  int64_t dims;
  at::ScalarType dtype;
  at::DeviceType device = at::kCPU;
};

std::ostream& operator<<(std::ostream& os, const LinearCase& c) {
  return os << (c.layout == nn::WeightLayout::OutIn ? "Linear" : "Conv1D") << (c.bias ? "_bias" : "") << "_" << c.dims
            << "d_" << c10::toString(c.dtype) << (c.device == at::kCUDA ? "_cuda" : "");
}

class GradientOnlyLinear : public ::testing::TestWithParam<LinearCase> {};

TEST_P(GradientOnlyLinear, SendsAutogradsGradientsBitwiseAndAValueOfNaN) {
  const auto c = GetParam();
  if (c.device == at::kCUDA && !torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  torch::manual_seed(3);
  // Long enough rows and sums for the GEMMs to block them. (On CI's CPU, MKL gave the same
  // bits for a transposed layout of the same product too; cuBLAS picks kernels by layout,
  // hence the CUDA cases.)
  const int64_t in = 96, out = 80, batch = 4, seq = 150;
  const auto opts = torch::TensorOptions().dtype(c.dtype).device(c.device);
  const auto x_shape = c.dims == 3 ? std::vector<int64_t>{batch, seq, in} : std::vector<int64_t>{batch * seq, in};
  auto y_shape = x_shape;
  y_shape.back() = out;
  auto x = torch::randn(x_shape, opts);
  auto weight = c.layout == nn::WeightLayout::OutIn ? torch::randn({out, in}, opts) : torch::randn({in, out}, opts);
  auto bias = c.bias ? torch::randn({out}, opts) : torch::Tensor();
  auto upstream = torch::randn(y_shape, opts);
  auto leaves = [&] {
    std::vector<torch::Tensor> v{x.clone().requires_grad_(), weight.clone().requires_grad_()};
    if (c.bias) v.push_back(bias.clone().requires_grad_());
    return v;
  };
  auto expected = leaves();
  const torch::Tensor b = c.bias ? expected[2] : torch::Tensor();
  torch::Tensor y;
  if (c.layout == nn::WeightLayout::OutIn) {
    y = torch::nn::functional::linear(expected[0], expected[1], b);
  } else {  // Conv1D's forward (Conv1D always has a bias)
    y = torch::addmm(b, expected[0].reshape({-1, in}), expected[1]).view(upstream.sizes());
  }
  (y + 1).backward(upstream);  // an add between, as the block's residual

  auto actual = leaves();
  auto value = nn::gradient_only_linear(actual[0], actual[1], c.bias ? actual[2] : torch::Tensor(), c.layout);
  ASSERT_TRUE(value.defined());
  EXPECT_EQ(value.sizes(), y.sizes());
  EXPECT_EQ(value.scalar_type(), c.dtype);
  EXPECT_TRUE(value.isnan().all().item<bool>());
  (value + 1).backward(upstream);
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(torch::equal(expected[i].grad(), actual[i].grad()));
    EXPECT_EQ(expected[i].grad().strides(), actual[i].grad().strides());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GradientOnlyLinear,
    ::testing::Values(LinearCase{nn::WeightLayout::OutIn, false, 3, at::kFloat},
                      LinearCase{nn::WeightLayout::OutIn, true, 3, at::kFloat},
                      LinearCase{nn::WeightLayout::OutIn, false, 2, at::kFloat},
                      LinearCase{nn::WeightLayout::OutIn, true, 2, at::kFloat},
                      LinearCase{nn::WeightLayout::InOut, true, 3, at::kFloat},
                      LinearCase{nn::WeightLayout::InOut, true, 2, at::kFloat},
                      LinearCase{nn::WeightLayout::OutIn, false, 3, at::kBFloat16},
                      LinearCase{nn::WeightLayout::OutIn, true, 3, at::kBFloat16},
                      LinearCase{nn::WeightLayout::InOut, true, 3, at::kBFloat16},
                      // cuBLAS picks its kernel by layout: the same ops, not merely the same product.
                      LinearCase{nn::WeightLayout::OutIn, false, 3, at::kBFloat16, at::kCUDA},
                      LinearCase{nn::WeightLayout::OutIn, true, 3, at::kFloat, at::kCUDA},
                      LinearCase{nn::WeightLayout::InOut, true, 3, at::kBFloat16, at::kCUDA}),
    [](const auto& info) {
      std::ostringstream name;
      name << info.param;
      return name.str();
    });

TEST(GradientOnlyLinearInputs, DeclinesWhatItDoesNotReplicate) {
  auto w = torch::randn({4, 6});
  auto x = torch::randn({3, 6});
  EXPECT_TRUE(nn::gradient_only_linear(x, w, {}, nn::WeightLayout::OutIn).defined());
  EXPECT_FALSE(nn::gradient_only_linear(torch::randn({6, 3}).t(), w, {}, nn::WeightLayout::OutIn).defined());
  EXPECT_FALSE(nn::gradient_only_linear(torch::randn({2, 2, 3, 6}), w, {}, nn::WeightLayout::OutIn).defined());
  EXPECT_FALSE(nn::gradient_only_linear(x, torch::randn({6, 4}).t(), {}, nn::WeightLayout::OutIn).defined());
  EXPECT_FALSE(nn::gradient_only_linear(x.to(at::kBFloat16), w, {}, nn::WeightLayout::OutIn).defined());
  EXPECT_FALSE(nn::gradient_only_linear(x, w, torch::randn({5}), nn::WeightLayout::OutIn).defined());
  EXPECT_FALSE(nn::gradient_only_linear(x, w, {}, nn::WeightLayout::InOut).defined());  // 6 != 4 inputs
  compat::AutocastGuard autocast(compat::AutocastState::only(at::kCPU, at::kBFloat16));
  EXPECT_FALSE(nn::gradient_only_linear(x, w, {}, nn::WeightLayout::OutIn).defined());
}

// Every family's block, checkpointed: the recomputation skips the value of the block's last
// projection (one call per block) where that projection is the block's last module call,
// and every gradient is still bitwise that of the run without checkpointing.
struct FamilyCase {
  std::string type;
  bool post_norm;  // OPT-350M's layout: a norm's call follows the last projection
  at::ScalarType dtype;
};

std::ostream& operator<<(std::ostream& os, const FamilyCase& c) {
  return os << c.type << (c.post_norm ? "_post_norm" : "") << "_" << c10::toString(c.dtype);
}

class SkippedProjection : public ::testing::TestWithParam<FamilyCase> {};

struct LmPass {
  double loss = 0;
  Named grads;
  int64_t skipped = 0;  // calls_without_value during the pass
};

LmPass lm_forward_backward(const FamilyCase& c, const std::string& checkpointed_type) {
  auto config = models::from_scratch_config(c.type, "tiny", 128);
  if (c.post_norm) config["do_layer_norm_before"] = false;
  auto lm = models::build_causal_lm(config, "test");
  models::init_from_scratch(lm, 11);
  lm.module->to(c.dtype);
  if (!checkpointed_type.empty()) fsdp::apply_activation_checkpointing(*lm.module, {{checkpointed_type}, 1});
  auto tokens = torch::randint(128, {2, 17}, torch::kLong);  // the caller seeds
  const int64_t before = nn::calls_without_value();
  auto logits = lm.logits(tokens.slice(1, 0, 16));
  auto loss = models::lm_loss(logits.to(at::kFloat), tokens.slice(1, 1, 17));
  loss.backward();
  LmPass out{loss.item<double>(), {}, nn::calls_without_value() - before};
  for (const auto& item : lm.module->named_parameters()) out.grads.emplace_back(item.key(), item.value().grad());
  return out;
}

TEST_P(SkippedProjection, EachBlocksLastProjectionIsNotRecomputedAndGradientsStayBitwise) {
  const auto c = GetParam();
  const auto block_type = models::build_causal_lm(models::from_scratch_config(c.type, "tiny", 128), "test").block_type;
  torch::manual_seed(5);
  auto plain = lm_forward_backward(c, "");
  torch::manual_seed(5);
  auto checkpointed = lm_forward_backward(c, block_type);
  EXPECT_EQ(plain.skipped, 0);
  const int64_t layers = models::from_scratch_config(c.type, "tiny", 128)
                             .value(c.type == "gpt2" ? "n_layer" : "num_hidden_layers", int64_t{0});
  ASSERT_GT(layers, 0);
  EXPECT_EQ(checkpointed.skipped, c.post_norm ? 0 : layers);
  EXPECT_EQ(plain.loss, checkpointed.loss);
  expect_bitwise_equal(plain.grads, checkpointed.grads);
}

INSTANTIATE_TEST_SUITE_P(Families, SkippedProjection,
                         ::testing::Values(FamilyCase{"gpt2", false, at::kFloat},
                                           FamilyCase{"llama", false, at::kFloat}, FamilyCase{"opt", false, at::kFloat},
                                           FamilyCase{"opt", true, at::kFloat},
                                           FamilyCase{"gpt2", false, at::kBFloat16},
                                           FamilyCase{"llama", false, at::kBFloat16}),
                         [](const auto& info) {
                           std::ostringstream name;
                           name << info.param;
                           return name.str();
                         });

// Checkpointing the whole model: its last module call is the head, not a block's
// projection, so nothing is skipped, and a block's projection is never taken for the last.
TEST(SkippedProjectionWholeModel, NothingIsSkippedWhenTheLastCallIsNotASummedProjection) {
  const FamilyCase c{"llama", false, at::kFloat};
  torch::manual_seed(5);
  auto plain = lm_forward_backward(c, "");
  torch::manual_seed(5);
  auto whole = lm_forward_backward(c, "fsdpp::models::LlamaForCausalLMImpl");
  EXPECT_EQ(whole.skipped, 0);
  expect_bitwise_equal(plain.grads, whole.grads);
}

}  // namespace
}  // namespace fsdpp
