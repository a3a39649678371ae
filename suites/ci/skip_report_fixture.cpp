// A GoogleTest binary for suites/ci/skip_report_test.sh: a pass, a skip that says why, and
// a skip that does not. Not registered as ctest groups (its silent skip fails on purpose).
#include <gtest/gtest.h>

TEST(Fixture, Passes) { EXPECT_EQ(1 + 1, 2); }

TEST(Fixture, SkipsWithAReason) { GTEST_SKIP() << "the reason it skips"; }

TEST(Silent, SkipsWithoutAReason) { GTEST_SKIP(); }
