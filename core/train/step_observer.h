// What a training loop tells an observer, at fixed points of every step, on every rank.
// core/train only calls it; what watches lives in harness/: the equivalence oracle records
// the gradients clipping sees and injects an overflow (harness/equiv/equivalence.cpp), the
// resume tests stop the process at a known step (harness/cli/train_command.cpp). An
// observer may run collectives (every rank reaches each call point alike).
#pragma once

#include <cstdint>
#include <functional>

namespace fsdpp::train {

class StepObserver {
 public:
  virtual ~StepObserver() = default;

  // TrainStep::run: after the step's last backward, before loss scaling unscales the
  // gradients (what the loss scaler is about to inspect).
  virtual void after_backward() {}
  // TrainStep::run: the gradients as clipping will see them (unscaled, not yet clipped).
  virtual void before_clip() {}
  // train(): step `steps_done` (1-based) is done and logged, and its checkpoint, if one was
  // due, has been started. `settle` waits until that checkpoint has committed (a background
  // save too) and logs it: what a process must do before it stops there.
  virtual void after_step(int64_t steps_done, const std::function<void()>& settle) {}
};

}  // namespace fsdpp::train
