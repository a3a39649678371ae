// What the CUDA suites share. Whether a test can run here is asked without initialising
// CUDA: the parent test process must not touch CUDA before run_ranks forks (a CUDA context
// does not survive fork), so the GPUs are counted from /dev/nvidia*.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <system_error>

#include "harness/testing/multirank.h"

#ifndef FSDPP_WITH_CUDA
#define FSDPP_WITH_CUDA 0
#endif

namespace fsdpp::cuda_testing {

// GPUs visible to this machine without initialising CUDA in this process (0 in CPU builds).
inline int gpus_without_cuda_init() {
#if FSDPP_WITH_CUDA
  int count = 0;
  const std::regex node("nvidia[0-9]+");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", ec))
    if (std::regex_match(entry.path().filename().string(), node)) ++count;
  return count;
#else
  return 0;
#endif
}

// Ranks that keep their output to themselves, with `env` set in this process first (the
// forked ranks inherit it).
inline harness::RunOptions with_env(const std::map<std::string, std::string>& env = {}) {
  harness::RunOptions options;
  options.launch.echo_output = false;
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  return options;
}

}  // namespace fsdpp::cuda_testing

// Skips the test, saying why, unless the machine has at least n GPUs.
#define REQUIRE_GPUS(n)                                                                                          \
  do {                                                                                                           \
    const int have_ = ::fsdpp::cuda_testing::gpus_without_cuda_init();                                           \
    if (have_ < (n))                                                                                             \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this " << (FSDPP_WITH_CUDA ? "machine" : "CPU build") \
                   << " has " << have_;                                                                          \
  } while (0)
