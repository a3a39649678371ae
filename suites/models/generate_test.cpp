// Model construction from config.json objects, sampling filters, generation and the
// held-out loss of `fsdpp eval`.
#include "core/models/generate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/models/causal_lm.h"
#include "core/models/llama.h"
#include "core/models/presets.h"

namespace fsdpp::models {
namespace {

using ::testing::HasSubstr;

CausalLm tiny_llama() {
  torch::manual_seed(3);
  return build_causal_lm(llama_preset("tiny").to_json(), "tiny/config.json");
}

TEST(CausalLm, EveryFamilyBuildsFromItsConfigAndUnknownOnesAreNamed) {
  auto lm = tiny_llama();
  EXPECT_EQ(lm.model_type, "llama");
  EXPECT_EQ(lm.logits(torch::zeros({1, 5}, torch::kLong)).sizes(), (std::vector<int64_t>{1, 5, 97}));
  for (const auto& type : supported_model_types()) {  // every family, from its tiny config.json
    auto built = build_causal_lm(from_scratch_config(type, "tiny"), type + "/config.json");
    EXPECT_EQ(built.model_type, type);
    torch::NoGradGuard no_grad;
    EXPECT_EQ(built.logits(torch::zeros({1, 5}, torch::kLong)).sizes(), (std::vector<int64_t>{1, 5, built.vocab_size}))
        << type;
  }
  auto mistral = llama_preset("tiny").to_json();
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = 4;
  torch::manual_seed(3);
  auto windowed = build_causal_lm(mistral, "m/config.json").logits;
  mistral["sliding_window"] = nullptr;
  torch::manual_seed(3);  // the same weights
  auto full = build_causal_lm(mistral, "m/config.json").logits;
  torch::NoGradGuard no_grad;
  const auto tokens = torch::arange(1, 7, torch::kLong).unsqueeze(0);
  const auto a = windowed(tokens), b = full(tokens);
  // Positions 0-3 see no further back than the window; 4 and 5 would see token 0 or 1.
  EXPECT_TRUE(torch::allclose(a.narrow(1, 0, 4), b.narrow(1, 0, 4), 1.3e-6, 1e-5));  // two attention kernels
  EXPECT_FALSE(torch::allclose(a.narrow(1, 4, 2), b.narrow(1, 4, 2)));
  auto unknown = mistral;
  unknown["model_type"] = "bloom";
  try {
    build_causal_lm(unknown, "x/config.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("x/config.json: unknown model_type 'bloom'"));
  }
  unknown.erase("model_type");
  EXPECT_THROW(build_causal_lm(unknown, "x/config.json"), std::invalid_argument);
}

TEST(Sampling, TopKAndTopPKeepExactlyTheRightTokens) {
  auto logits = torch::log(torch::tensor({0.1, 0.5, 0.2, 0.15, 0.05}, torch::kDouble)).to(torch::kFloat);
  auto kept = [](const torch::Tensor& t) { return torch::isfinite(t).nonzero().reshape({-1}); };
  EXPECT_TRUE(torch::equal(kept(filter_logits(logits, 2, 1.0)), torch::tensor({1, 2}, torch::kLong)));
  // Sorted: 0.5, 0.2, 0.15, 0.1, 0.05. p = 0.6 needs the first two; p = 0.5 the first.
  EXPECT_TRUE(torch::equal(kept(filter_logits(logits, 0, 0.6)), torch::tensor({1, 2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(kept(filter_logits(logits, 0, 0.5)), torch::tensor({1}, torch::kLong)));
  EXPECT_EQ(kept(filter_logits(logits, 0, 1.0)).numel(), 5);
}

TEST(Generation, GreedyIsTheStepwiseArgmaxAndTopK1IsGreedy) {
  auto lm = tiny_llama();
  std::vector<int64_t> prompt = {5, 17, 42};
  SamplingOptions greedy;
  greedy.max_new_tokens = 6;
  greedy.temperature = 0;
  auto out = generate(lm, prompt, greedy);
  ASSERT_EQ(out.size(), 9u);
  torch::NoGradGuard no_grad;
  std::vector<int64_t> manual = prompt;
  for (int i = 0; i < 6; ++i) {
    auto logits = lm.logits(torch::tensor(manual, torch::kLong).unsqueeze(0));
    manual.push_back(logits[0][-1].argmax().item<int64_t>());
  }
  EXPECT_EQ(out, manual);
  SamplingOptions top1 = greedy;
  top1.temperature = 0.7;
  top1.top_k = 1;
  EXPECT_EQ(generate(lm, prompt, top1), manual);
  SamplingOptions sampled = greedy;
  sampled.temperature = 1.0;
  sampled.seed = 11;
  EXPECT_EQ(generate(lm, prompt, sampled), generate(lm, prompt, sampled)) << "same seed, same text";
}

TEST(Evaluation, LossIsTheMeanOverAllNonOverlappingWindows) {
  auto lm = tiny_llama();
  const int64_t T = 4;
  auto tokens = torch::randint(0, 97, {2 * T + 3}, torch::kLong);  // two full windows, 2 tokens left over
  auto r = evaluate(lm, tokens, T, /*batch_size=*/1);
  EXPECT_EQ(r.tokens, 2 * T);
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (int64_t w = 0; w < 2; ++w) {
    auto logits = lm.logits(tokens.narrow(0, w * T, T).unsqueeze(0))[0];
    for (int64_t t = 0; t < T; ++t) {
      auto logp = torch::log_softmax(logits[t].to(torch::kDouble), 0);
      sum -= logp[tokens[w * T + t + 1].item<int64_t>()].item<double>();
    }
  }
  EXPECT_NEAR(r.loss, sum / (2 * T), 1e-5);
  EXPECT_NEAR(r.perplexity, std::exp(r.loss), 1e-9);
  EXPECT_THROW(evaluate(lm, tokens.narrow(0, 0, T), T), std::invalid_argument);  // no full window
}

}  // namespace
}  // namespace fsdpp::models
