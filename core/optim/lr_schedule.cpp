#include "core/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace fsdpp::optim {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "cosine") return LrDecay::Cosine;
  if (name == "linear") return LrDecay::Linear;
  if (name == "constant") return LrDecay::Constant;
  throw std::invalid_argument("learning rate schedule '" + name + "': expected cosine, linear or constant");
}

std::string to_string(LrDecay decay) {
  switch (decay) {
    case LrDecay::Cosine: return "cosine";
    case LrDecay::Linear: return "linear";
    case LrDecay::Constant: return "constant";
  }
  return "?";
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (decay == LrDecay::Constant) return max_lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - 1 - warmup_steps));
  const double p = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  if (decay == LrDecay::Linear) return max_lr - (max_lr - min_lr) * p;
  return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
}

}  // namespace fsdpp::optim
