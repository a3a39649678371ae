// fsdpp's CUDA plugin (core/runtime/cuda_plugin.h): loaded before main() where a CUDA driver
// is, never loaded where none is (so that a process there does not load LibTorch's CUDA
// libraries), and FSDPP_CUDA_PLUGIN's forms. Each case starts `fsdpp --version`, which names
// the plugin's state, under LD_DEBUG=files, which names every library the process loads.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

bool machine_has_cuda_driver() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return false;
  dlclose(driver);
  return true;
}

// `fsdpp --version` with FSDPP_CUDA_PLUGIN set to `setting` ("" leaves it unset), and every
// library load the dynamic linker reports.
std::pair<int, std::string> version_under(const std::string& setting) {
  const std::string env = setting.empty() ? "env -u FSDPP_CUDA_PLUGIN" : "env FSDPP_CUDA_PLUGIN='" + setting + "'";
  return harness::run_shell(env + " LD_DEBUG=files " + kFsdpp + " --version 2>&1");
}

// Whether the dynamic linker's report shows `library` being loaded ("file=libx.so [0];  ...").
bool loads(const std::string& output, const std::string& library) {
  return output.find("file=" + library + " ") != std::string::npos;
}

TEST(CudaPlugin, IsNotLoadedAndLoadsNoCudaLibraryWhereTheMachineHasNoCudaDriver) {
  if (machine_has_cuda_driver()) GTEST_SKIP() << "this machine has a CUDA driver (libcuda.so.1)";
  auto [code, output] = version_under("");
  ASSERT_EQ(code, 0) << output;
#if FSDPP_WITH_CUDA
  EXPECT_THAT(output, HasSubstr("\nCUDA plugin not loaded: no CUDA driver (libcuda.so.1) on this machine"));
#else
  EXPECT_THAT(output, HasSubstr("\nCUDA plugin not built: a CPU-only LibTorch"));
#endif
  EXPECT_TRUE(loads(output, "libtorch_cpu.so")) << output;
  for (const char* cuda : {"libfsdpp_cuda.so", "libtorch_cuda.so", "libc10_cuda.so", "libnccl.so.2", "libcublas.so.13"})
    EXPECT_FALSE(loads(output, cuda)) << cuda << " was loaded:\n" << output;
}

TEST(CudaPlugin, IsLoadedWhereTheMachineHasACudaDriver) {
  if (!machine_has_cuda_driver()) GTEST_SKIP() << "needs a CUDA driver (libcuda.so.1); this machine has none";
  auto [code, output] = version_under("");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("\nCUDA plugin loaded from "));
  EXPECT_TRUE(loads(output, "libtorch_cuda.so")) << output;
}

#if FSDPP_WITH_CUDA
TEST(CudaPlugin, OnLoadsItFromTheBuildWithLibTorchCudaAndNcclWhateverTheDriver) {
  auto [code, output] = version_under("on");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("\nCUDA plugin loaded from "));
  EXPECT_THAT(output, HasSubstr("/core/libfsdpp_cuda.so"));
  for (const char* cuda : {"libfsdpp_cuda.so", "libtorch_cuda.so", "libc10_cuda.so", "libnccl.so.2"})
    EXPECT_TRUE(loads(output, cuda)) << cuda << " was not loaded:\n" << output;
}

TEST(CudaPlugin, WithThePluginAndNoGpuACudaDeviceIsRefusedForHavingNoGpu) {
  // The plugin's device count (libc10_cuda's) answers 0 on a machine without a GPU.
  if (machine_has_cuda_driver()) GTEST_SKIP() << "this machine has a CUDA driver; its GPUs are counted elsewhere";
  auto [code, output] = harness::run_shell("env FSDPP_CUDA_PLUGIN=on " + kFsdpp +
                                           " train --device cuda --data /nonexistent.tok --model gpt2-tiny "
                                           "--max-steps 1 2>&1");
  EXPECT_EQ(code, 2) << output;
  EXPECT_THAT(output, HasSubstr("--device 'cuda': this build/machine has no CUDA device (CUDA plugin loaded, but no "
                                "GPU is visible)"));
}

// The NCCL backend's engine: c10d's ProcessGroupNCCL unless FSDPP_NCCL_ENGINE=fsdpp asks for
// fsdpp's own NCCL group. The plugin is loaded RTLD_NOW, so its ProcessGroupNCCL calls
// resolved against libtorch_cuda here too.
TEST(CudaPlugin, NcclCollectivesGoThroughC10dProcessGroupNcclUnlessFsdppsOwnEngineIsAsked) {
  auto [code, output] = version_under("on");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("\nNCCL collectives through c10d ProcessGroupNCCL"));
  auto [own_code, own] =
      harness::run_shell("env FSDPP_CUDA_PLUGIN=on FSDPP_NCCL_ENGINE=fsdpp " + kFsdpp + " --version 2>&1");
  ASSERT_EQ(own_code, 0) << own;
  EXPECT_THAT(own, HasSubstr("\nNCCL collectives through fsdpp's own NCCL group (FSDPP_NCCL_ENGINE=fsdpp)"));
}

TEST(CudaPlugin, APathLoadsThatFileAndAMissingOneIsNamedInTheReason) {
  auto [code, output] = version_under("/nonexistent/libfsdpp_cuda.so");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("\nCUDA plugin not loaded: /nonexistent/libfsdpp_cuda.so: cannot open shared object"));
  EXPECT_FALSE(loads(output, "libtorch_cuda.so")) << output;
}
#endif

TEST(CudaPlugin, OffIsNeverLoaded) {
  auto [code, output] = version_under("off");
  ASSERT_EQ(code, 0) << output;
#if FSDPP_WITH_CUDA
  EXPECT_THAT(output, HasSubstr("\nCUDA plugin not loaded: FSDPP_CUDA_PLUGIN=off"));
#endif
  EXPECT_FALSE(loads(output, "libtorch_cuda.so")) << output;
}

TEST(CudaPlugin, AnUnknownNcclEngineIsRefusedInOneLineWithExit2) {
  auto [code, output] = harness::run_shell("env FSDPP_NCCL_ENGINE=raw " + kFsdpp + " --version 2>&1");
  EXPECT_EQ(code, 2) << output;
  EXPECT_EQ(output, "fsdpp: FSDPP_NCCL_ENGINE='raw': expected c10d (ProcessGroupNCCL, the default) or fsdpp\n");
}

TEST(CudaPlugin, AnUnknownSettingIsRefusedInOneLineWithExit2) {
  auto [code, output] = harness::run_shell("env FSDPP_CUDA_PLUGIN=yes " + kFsdpp + " --version 2>&1");
  EXPECT_EQ(code, 2) << output;
  EXPECT_EQ(output, "fsdpp: FSDPP_CUDA_PLUGIN='yes': expected auto, on, off or a path to libfsdpp_cuda.so\n");
}

}  // namespace
}  // namespace fsdpp
