// The check a user writes against fsdpp::harness for their own model: it trains sharded on
// 2 ranks (FULL_SHARD, each residual block its own unit) and unsharded in one process with
// plain LibTorch, from the same weights and batches, and rank 0 compares the losses,
// gradient norms and every full parameter and gradient (harness/equiv/equivalence.h): once
// within fp32 tolerance with gradient clipping, once bit for bit (deterministic mode).
// Exit 0 when both agree; 1 with the comparison and the ranks' last lines when one does not.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/nn/module_hooks.h"
#include "harness/equiv/equivalence.h"
#include "harness/launch/run_ranks.h"

namespace example {

// The user's model, which knows nothing about sharding: a residual MLP regressor. Its
// blocks are called through fsdpp::nn::call, so that FSDP's hooks run around each one.
struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t dim)
      : fc_in(register_module("fc_in", torch::nn::Linear(dim, 3 * dim))),
        fc_out(register_module("fc_out", torch::nn::Linear(3 * dim, dim))) {}
  torch::Tensor forward(torch::Tensor x) { return x + fc_out(torch::gelu(fc_in(x))); }
  torch::nn::Linear fc_in, fc_out;
};
TORCH_MODULE(ResidualBlock);

constexpr int64_t kInputs = 5, kWidth = 11, kOutputs = 3;  // odd sizes: rows do not divide over 2 ranks

struct RegressorImpl : torch::nn::Module {
  RegressorImpl()
      : stem(register_module("stem", torch::nn::Linear(kInputs, kWidth))),
        head(register_module("head", torch::nn::Linear(kWidth, kOutputs))) {
    for (int i = 0; i < 3; ++i)
      blocks.emplace_back(register_module("block" + std::to_string(i), ResidualBlock(kWidth)));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = stem(x);
    for (auto& block : blocks) x = fsdpp::nn::call(block, x);
    return head(x);
  }
  torch::nn::Linear stem, head;
  std::vector<ResidualBlock> blocks;
};
TORCH_MODULE(Regressor);

// The model as the equivalence runner takes it: how to build it from a seed, its loss, and
// micro-batch `index` of step `step`, the same in every process.
fsdpp::harness::EquivModel regressor_case() {
  using fsdpp::harness::TrainBatch;
  fsdpp::harness::EquivModel m;
  m.name = "residual_regressor";
  m.build = [](uint64_t seed) -> std::shared_ptr<torch::nn::Module> {
    torch::manual_seed(seed);
    return Regressor().ptr();
  };
  m.loss = [](torch::nn::Module& net, const TrainBatch& b) {
    return torch::mse_loss(fsdpp::nn::call_impl(dynamic_cast<RegressorImpl&>(net), b.input), b.target);
  };
  m.batch = [](int64_t step, int64_t index) {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(1000 * step + index + 1));
    auto input = at::randn({4, kInputs}, gen, at::kFloat);
    return TrainBatch{input, at::randn({4, kOutputs}, gen, at::kFloat)};
  };
  m.concat = [](const std::vector<TrainBatch>& parts) {
    std::vector<torch::Tensor> inputs, targets;
    for (const auto& p : parts) {
      inputs.push_back(p.input);
      targets.push_back(p.target);
    }
    return TrainBatch{torch::cat(inputs), torch::cat(targets)};
  };
  m.wrap = fsdpp::fsdp::wrap_by_module_type({"example::ResidualBlockImpl"});
  return m;
}

}  // namespace example

int main() {
  for (bool deterministic : {false, true}) {
    fsdpp::harness::EquivConfig config;  // FULL_SHARD, fp32, AdamW
    config.steps = 6;
    config.deterministic = deterministic;
    // Clipping only within tolerance: the reference's clip_grad_norm_ sums the squares in
    // another order than the shards' norm, so the clipped gradients differ in the last bit.
    config.clip_max_norm = deterministic ? 0.0 : 1.0;
    auto launch = fsdpp::harness::run_ranks(2, [&](fsdpp::harness::RankContext& rank) {
      auto report = fsdpp::harness::run_equivalence(rank.comm, example::regressor_case(), config);
      if (rank.rank != 0) return;
      std::printf("%s", report.table().c_str());
      if (!report.ok()) throw std::runtime_error("sharded training differs from unsharded training");
    });
    const char* mode = deterministic ? "bit for bit" : "within fp32 tolerance";
    if (!launch.ok()) {
      std::fprintf(stderr, "check_equivalence (%s): %s\n", mode, launch.summary().c_str());
      return 1;
    }
    std::printf("check_equivalence: 2-rank FULL_SHARD training equals unsharded training %s\n", mode);
  }
  return 0;
}
