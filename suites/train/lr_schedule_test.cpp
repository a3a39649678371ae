// The learning-rate schedules follow the formulas written in core/optim/lr_schedule.h
// and the README: linear warmup, then cosine/linear decay from max_lr (first step after
// warmup) to min_lr (last step), or constant.
#include "core/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fsdpp::optim {
namespace {

LrSchedule schedule(LrDecay decay) { return LrSchedule{1e-3, 1e-4, 10, 110, decay}; }

TEST(LrSchedule, WarmupRisesLinearlyToTheMaximum) {
  auto s = schedule(LrDecay::Cosine);
  EXPECT_DOUBLE_EQ(s.at(0), 1e-3 * 1 / 10);
  EXPECT_DOUBLE_EQ(s.at(4), 1e-3 * 5 / 10);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
}

TEST(LrSchedule, CosineDecaysFromMaxAfterWarmupToMinAtTheLastStep) {
  auto s = schedule(LrDecay::Cosine);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(109), 1e-4);
  // Halfway through the decay (p = 0.5): the mean of max and min.
  const double p = (60.0 - 10) / (110 - 1 - 10);
  EXPECT_DOUBLE_EQ(s.at(60), 1e-4 + (1e-3 - 1e-4) * 0.5 * (1 + std::cos(M_PI * p)));
  for (int64_t step = 11; step < 110; ++step) EXPECT_LT(s.at(step), s.at(step - 1)) << step;
}

TEST(LrSchedule, LinearDecaysByEqualAmounts) {
  auto s = schedule(LrDecay::Linear);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(109), 1e-4);
  EXPECT_NEAR(s.at(20) - s.at(21), s.at(90) - s.at(91), 1e-15);
}

TEST(LrSchedule, ConstantStaysAtTheMaximumAfterWarmup) {
  auto s = schedule(LrDecay::Constant);
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  for (int64_t step : {10, 50, 109, 500}) EXPECT_DOUBLE_EQ(s.at(step), 1e-3);
}

TEST(LrSchedule, WithoutWarmupTheFirstStepRunsAtTheMaximum) {
  LrSchedule s{2e-3, 0, 0, 5, LrDecay::Linear};
  EXPECT_DOUBLE_EQ(s.at(0), 2e-3);
  EXPECT_DOUBLE_EQ(s.at(4), 0.0);
}

TEST(LrSchedule, ParsingNamesTheBadValue) {
  EXPECT_EQ(parse_lr_decay("linear"), LrDecay::Linear);
  try {
    parse_lr_decay("exponential");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'exponential'"), std::string::npos);
  }
}

}  // namespace
}  // namespace fsdpp::optim
