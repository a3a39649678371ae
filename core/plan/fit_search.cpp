#include "core/plan/fit_search.h"

#include <cstdio>
#include <stdexcept>

namespace fsdpp::plan {

FitResult search_fit(const std::string& model, const ModelShape& shape, const PlanConfig& base) {
  if (base.device.memory_bytes <= 0 || base.device.matmul_flops_per_s <= 0)
    throw std::invalid_argument("--fit needs --gpu-memory h100|h200|a100-80g (a memory and a device rate)");
  const int64_t rows_per_step = base.batch_size * base.grad_accum_steps;
  FitResult result;
  for (auto strategy : fsdp::all_strategies()) {
    for (bool ac : {false, true}) {
      for (bool offload : {false, true}) {
        for (int64_t micro = 1; micro <= rows_per_step; micro *= 2) {
          if (rows_per_step % micro != 0) continue;
          PlanConfig c = base;
          c.strategy = strategy;
          c.activation_checkpointing = ac;
          c.ac_freq = ac ? base.ac_freq : 1;
          c.cpu_offload = offload;
          c.batch_size = micro;
          c.grad_accum_steps = rows_per_step / micro;
          FitCandidate candidate;
          try {
            candidate.plan = make_plan(model, shape, c);
            candidate.verdict = candidate.plan.fits ? "" : candidate.plan.fit_reason;
          } catch (const std::invalid_argument& e) {
            candidate.plan.config = c;
            candidate.verdict = std::string("cannot run: ") + e.what();
          }
          result.candidates.push_back(std::move(candidate));
        }
      }
    }
  }
  double best = -1;
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const auto& c = result.candidates[i];
    if (!c.verdict.empty()) continue;
    if (c.plan.time.tokens_per_s > best) {
      best = c.plan.time.tokens_per_s;
      result.chosen = static_cast<int>(i);
    }
  }
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    auto& c = result.candidates[i];
    if (static_cast<int>(i) == result.chosen) {
      c.chosen = true;
      c.verdict = "chosen";
    } else if (c.verdict.empty()) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "slower: %.0f tokens/s < %.0f (step %.1f ms)", c.plan.time.tokens_per_s, best,
                    c.plan.time.step_ms);
      c.verdict = buf;
    }
  }
  return result;
}

}  // namespace fsdpp::plan
