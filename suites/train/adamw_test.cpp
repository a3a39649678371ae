// AdamW's parameter groups: weight decay reaches 2-D+ parameters (matmuls, embeddings)
// and never 1-D ones (biases, norm weights); the step matches torch's AdamW per group.
#include "core/optim/adamw.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/models/presets.h"
#include "core/nn/unique_parameters.h"

namespace fsdpp::optim {
namespace {

TEST(AdamWGroups, DecayReachesMatricesButNotBiasesOrNormWeights) {
  auto matrix = torch::ones({2, 3}, torch::requires_grad());
  auto bias = torch::ones({3}, torch::requires_grad());
  auto norm_weight = torch::ones({3}, torch::requires_grad());
  auto opt =
      make_adamw({{"h.0.mlp.c_fc.weight", matrix}, {"h.0.mlp.c_fc.bias", bias}, {"h.0.ln_1.weight", norm_weight}},
                 AdamWSettings{0.1, 0.9, 0.999, 1e-8, 0.5});
  for (auto* p : {&matrix, &bias, &norm_weight}) p->mutable_grad() = torch::zeros_like(*p);
  opt->step();
  // Zero gradients: only decoupled weight decay moves a parameter, by lr * wd * p.
  EXPECT_TRUE(torch::allclose(matrix, torch::full_like(matrix, 1 - 0.1 * 0.5)));
  EXPECT_FALSE(torch::equal(matrix, torch::ones_like(matrix)));
  EXPECT_TRUE(torch::equal(bias, torch::ones_like(bias)));
  EXPECT_TRUE(torch::equal(norm_weight, torch::ones_like(norm_weight)));
}

TEST(AdamWGroups, EachGroupStepsExactlyLikeTorchAdamW) {
  torch::manual_seed(3);
  auto w = torch::randn({4, 4}, torch::requires_grad()), b = torch::randn({4}, torch::requires_grad());
  auto w_ref = w.detach().clone().requires_grad_(), b_ref = b.detach().clone().requires_grad_();
  AdamWSettings s{1e-2, 0.8, 0.99, 1e-6, 0.1};
  s.fused = false;  // the groups, not the kernel, are under test (fused_adamw_test.cpp has the kernel)
  auto opt = make_adamw({{"w", w}, {"b", b}}, s);
  torch::optim::AdamW ref_w({w_ref}, torch::optim::AdamWOptions(s.lr).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1));
  torch::optim::AdamW ref_b({b_ref}, torch::optim::AdamWOptions(s.lr).betas({0.8, 0.99}).eps(1e-6).weight_decay(0));
  for (int step = 0; step < 3; ++step) {
    auto gw = torch::randn({4, 4}), gb = torch::randn({4});
    w.mutable_grad() = gw.clone();
    b.mutable_grad() = gb.clone();
    w_ref.mutable_grad() = gw.clone();
    b_ref.mutable_grad() = gb.clone();
    set_lr(*opt, s.lr * (step + 1));
    for (auto* r : {&ref_w, &ref_b})
      static_cast<torch::optim::AdamWOptions&>(r->param_groups()[0].options()).lr(s.lr * (step + 1));
    opt->step();
    ref_w.step();
    ref_b.step();
  }
  EXPECT_TRUE(torch::equal(w, w_ref));
  EXPECT_TRUE(torch::equal(b, b_ref));
}

TEST(AdamWGroups, ATiedWeightListedUnderTwoNamesIsSteppedOnce) {
  auto tied = torch::ones({2, 3}, torch::requires_grad()), alone = torch::ones({2, 3}, torch::requires_grad());
  AdamWSettings s{0.1, 0.9, 0.999, 1e-8, 0.0};
  auto opt = make_adamw({{"wte.weight", tied}, {"lm_head.weight", tied}}, s);
  auto ref = make_adamw({{"w", alone}}, s);
  tied.mutable_grad() = torch::ones({2, 3});
  alone.mutable_grad() = torch::ones({2, 3});
  opt->step();
  ref->step();
  EXPECT_TRUE(torch::equal(tied, alone)) << tied << alone;  // stepped twice it would be 0.8, not 0.9
  EXPECT_EQ(opt->param_groups()[0].params().size(), 1u);
}

TEST(UniqueParameters, ATiedWeightIsListedOnceUnderItsFirstNameWithEveryAlias) {
  auto lm = models::build_causal_lm(models::from_scratch_config("gpt2", "tiny", 1000), "tiny");
  const auto unique = nn::unique_parameters(*lm.module);
  size_t listed = lm.module->named_parameters(true).size();
  ASSERT_EQ(unique.size(), listed - 1) << "GPT-2's LM head is its token embedding";
  const auto tie = std::find_if(unique.begin(), unique.end(), [](const auto& p) { return p.aliases.size() > 1; });
  ASSERT_NE(tie, unique.end());
  EXPECT_EQ(tie->name, "transformer.wte.weight");
  EXPECT_EQ(tie->aliases, (std::vector<std::string>{"transformer.wte.weight", "lm_head.weight"}));
  EXPECT_TRUE(tie->tensor.is_same(lm.module->named_parameters(true)["lm_head.weight"]));
  // The pairs form keeps named_parameters' order with the tie dropped.
  const auto named = nn::unique_named_parameters(*lm.module);
  ASSERT_EQ(named.size(), unique.size());
  for (size_t i = 0; i < named.size(); ++i) EXPECT_EQ(named[i].first, unique[i].name);
}

TEST(UniqueParameters, TheOptimizerListsEachTensorOnceInGroupOrder) {
  auto tied = torch::ones({2, 3}, torch::requires_grad()), bias = torch::ones({3}, torch::requires_grad());
  auto opt = make_adamw({{"wte.weight", tied}, {"b", bias}, {"lm_head.weight", tied}}, AdamWSettings{});
  const auto params = optimizer_parameters(*opt);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_TRUE(params[0].is_same(tied));  // the decay group first
  EXPECT_TRUE(params[1].is_same(bias));
}

TEST(FromScratchInit, MatricesAreNormalBiasesZeroNormsOne) {
  auto lm = models::build_causal_lm(models::from_scratch_config("gpt2", "tiny", 1000), "tiny");
  models::init_from_scratch(lm, 7);
  for (const auto& item : lm.module->named_parameters(true)) {
    const auto& p = item.value();
    if (p.dim() >= 2) {
      EXPECT_NEAR(p.std().item<double>(), 0.02, 0.002) << item.key();
    } else if (item.key().size() > 4 && item.key().substr(item.key().size() - 4) == "bias") {
      EXPECT_EQ(p.abs().max().item<float>(), 0.0f) << item.key();
    } else {
      EXPECT_TRUE(torch::equal(p, torch::ones_like(p))) << item.key();
    }
  }
  auto again = models::build_causal_lm(models::from_scratch_config("gpt2", "tiny", 1000), "tiny");
  models::init_from_scratch(again, 7);
  EXPECT_TRUE(torch::equal(lm.module->named_parameters()["transformer.h.0.attn.c_attn.weight"],
                           again.module->named_parameters()["transformer.h.0.attn.c_attn.weight"]));
}

TEST(FromScratchConfig, UnknownSizesAndTypesNameWhatIsKnown) {
  EXPECT_EQ(models::from_scratch_config("opt", "tiny", 512)["vocab_size"], 512);
  try {
    models::from_scratch_config("gpt2", "7B");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("124M"), std::string::npos) << e.what();
  }
  try {
    models::from_scratch_config("bert", "tiny");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'bert'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpt2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdpp::optim
