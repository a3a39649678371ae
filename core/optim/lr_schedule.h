// Learning rate per optimizer step: linear warmup to max_lr, then cosine or linear decay
// to min_lr by the last step, or constant (nanoGPT's and torchtitan's shapes).
//
// For step s (0-based, the s-th optimizer step), W warmup steps and S total steps:
//   s < W:     lr = max_lr * (s + 1) / W
//   otherwise: p = (s - W) / max(1, S - 1 - W) clamped to [0, 1]
//     cosine:   lr = min_lr + (max_lr - min_lr) * (1 + cos(pi * p)) / 2
//     linear:   lr = max_lr - (max_lr - min_lr) * p
//     constant: lr = max_lr
// so the first step after warmup runs at max_lr and the last step at min_lr.
#pragma once

#include <cstdint>
#include <string>

namespace fsdpp::optim {

enum class LrDecay { Cosine, Linear, Constant };

// "cosine", "linear", "constant"; throws std::invalid_argument naming the value.
LrDecay parse_lr_decay(const std::string& name);
std::string to_string(LrDecay decay);

struct LrSchedule {
  double max_lr = 3e-4;
  double min_lr = 0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  LrDecay decay = LrDecay::Cosine;

  double at(int64_t step) const;
};

}  // namespace fsdpp::optim
