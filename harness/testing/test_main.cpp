// main() of every suite binary: the parent process stays single-threaded in LibTorch so
// that forked ranks start from a clean state, and each rank sets its own thread budget.
#include <gtest/gtest.h>

#include "core/runtime/threads.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  fsdpp::runtime::configure_threads(1);
  return RUN_ALL_TESTS();
}
