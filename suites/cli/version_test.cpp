// `fsdpp --version`: fsdpp's version and commit, and the LibTorch, CUDA and NCCL it was
// built with, from build-time facts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include <string>

#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

TEST(VersionFlag, NamesFsdppItsCommitAndTheLibTorchCudaAndNcclItWasBuiltWith) {
  auto [code, output] = harness::run_shell(kFsdpp + " --version 2>&1");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, ContainsRegex("^fsdpp [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit [0-9a-f]{12}(\\+dirty)?\\)\n"));
  EXPECT_THAT(output, HasSubstr(std::string("LibTorch ") + TORCH_VERSION + "\n"));
#if defined(FSDPP_WITH_CUDA)
  EXPECT_THAT(output, ContainsRegex("\nCUDA [0-9]+\\.[0-9]+\nNCCL [0-9]+\\.[0-9]+\\.[0-9]+"));
#else
  EXPECT_THAT(output, HasSubstr("CUDA not built"));
#endif
}

}  // namespace
}  // namespace fsdpp
