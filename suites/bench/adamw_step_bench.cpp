// How long one AdamW step takes on the CPU benchmark model's parameters (GPT-2 mini256,
// vocab 8192: 5.3 M fp32 parameters in two groups, as `fsdpp bench` steps them), with
// FusedAdamW's host kernel and with torch::optim::AdamW's per-tensor step, alternating
// in one run so that both see the same machine. Reports per-step medians and their ratio.
//
//   adamw_step_bench [--steps N] [--threads T]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/models/causal_lm.h"
#include "core/models/presets.h"
#include "core/nn/unique_parameters.h"
#include "core/optim/adamw.h"
#include "core/optim/adamw_kernel.h"
#include "harness/results/stats.h"

using namespace fsdpp;

namespace {

struct Contender {
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::vector<double> step_ms;
};

Contender make_contender(bool fused, const std::vector<std::pair<std::string, at::Tensor>>& init) {
  Contender c;
  for (const auto& [name, p] : init) {
    auto copy = p.detach().clone().requires_grad_();
    copy.mutable_grad() = torch::randn_like(copy) * 1e-2;
    c.named.emplace_back(name, copy);
  }
  optim::AdamWSettings s;
  s.lr = 3e-4;
  s.weight_decay = 0.1;  // as `fsdpp bench`
  s.fused = fused;
  c.optimizer = optim::make_adamw(c.named, s);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 30, threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc || (flag != "--steps" && flag != "--threads")) {
      std::fprintf(stderr, "usage: adamw_step_bench [--steps N>=1] [--threads T>=1] (bad: %s)\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[++i];
    const int n = std::atoi(value.c_str());
    if (n < 1) {
      std::fprintf(stderr, "adamw_step_bench: %s expects a positive integer, got '%s'\n", flag.c_str(), value.c_str());
      return 2;
    }
    (flag == "--steps" ? steps : threads) = n;
  }
  at::set_num_threads(threads);
  torch::manual_seed(0);
  auto lm = models::build_causal_lm(models::from_scratch_config("gpt2", "mini256", 8192), "mini256");
  const auto init = nn::unique_named_parameters(*lm.module);  // the tied LM head once
  int64_t numel = 0;
  for (const auto& [name, p] : init) numel += p.numel();
  Contender fused = make_contender(true, init), per_tensor = make_contender(false, init);
  using Clock = std::chrono::steady_clock;
  for (int step = -2; step < steps; ++step) {  // two warm-up steps each (state allocation)
    for (auto* c : {&fused, &per_tensor}) {
      const auto t0 = Clock::now();
      c->optimizer->step();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (step >= 0) c->step_ms.push_back(ms);
    }
  }
  const double fused_ms = results::median(fused.step_ms), per_tensor_ms = results::median(per_tensor.step_ms);
  std::printf("AdamW step over %lld parameters, %d thread(s), median of %d steps:\n", static_cast<long long>(numel),
              threads, steps);
  std::printf("  %-10s (%s) %8.2f ms\n", optim::step_implementation(*fused.optimizer), optim::adamw_kernel_isa(),
              fused_ms);
  std::printf("  %-10s        %8.2f ms\n", optim::step_implementation(*per_tensor.optimizer), per_tensor_ms);
  std::printf("  speed-up          %8.2fx\n", per_tensor_ms / fused_ms);
  return 0;
}
