// A resume says when its batches cannot continue as the uninterrupted run's would: another
// global batch, or (bitwise --deterministic) another chunk size; silent otherwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/train/train_checkpoint.h"

namespace fsdpp::train {
namespace {

using ::testing::HasSubstr;

nlohmann::json saved_state(int64_t batch_size, int world_size, int accum) {
  return {{"world_size", world_size}, {"config", {{"batch_size", batch_size}, {"grad_accum_steps", accum}}}};
}

TrainConfig run_config(int64_t batch_size, int accum, bool deterministic) {
  TrainConfig c;
  c.batch_size = batch_size;
  c.grad_accum_steps = accum;
  c.deterministic = deterministic;
  return c;
}

TEST(BatchChangeNote, TheSameGlobalBatchOnAnotherLayoutIsSilent) {
  EXPECT_EQ(batch_change_note(saved_state(3, 4, 1), run_config(3, 2, false), 2), "");
  EXPECT_EQ(batch_change_note(saved_state(3, 4, 1), run_config(6, 1, false), 2), "");
  EXPECT_EQ(batch_change_note(saved_state(1, 4, 3), run_config(1, 12, true), 1), "");
}

TEST(BatchChangeNote, AnotherGlobalBatchIsNamedWithBothLayouts) {
  EXPECT_EQ(batch_change_note(saved_state(3, 4, 1), run_config(3, 1, false), 2),
            "the checkpoint was trained with 12 windows per step (batch size 3 x 4 ranks x 1 accumulation steps), "
            "this run uses 6 windows per step (batch size 3 x 2 ranks x 1 accumulation steps): it continues from "
            "the same data position, but not as the uninterrupted run would");
}

TEST(BatchChangeNote, DeterministicModeAlsoNeedsTheSameBatchSize) {
  EXPECT_EQ(batch_change_note(saved_state(2, 2, 1), run_config(1, 2, false), 2), "");
  EXPECT_THAT(batch_change_note(saved_state(2, 2, 1), run_config(1, 2, true), 2),
              HasSubstr("--deterministic: the checkpoint was trained with --batch-size 2, this run uses 1"));
}

TEST(BatchChangeNote, ACheckpointWithoutItsLayoutSaysItCannotTell) {
  EXPECT_THAT(batch_change_note(nlohmann::json::object(), run_config(2, 1, false), 1), HasSubstr("cannot tell"));
}

}  // namespace
}  // namespace fsdpp::train
