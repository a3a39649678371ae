// train::ProgressBar on a terminal: stderr is made a pseudo-terminal's replica for the test,
// and what the bar wrote is read from the primary side.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/train/metrics_log.h"

namespace fsdpp::train {
namespace {

// Runs `draw` with stderr on a fresh pseudo-terminal; returns what reached the terminal.
template <typename Draw>
std::string on_a_terminal(Draw draw) {
  const int primary = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (primary < 0 || ::grantpt(primary) != 0 || ::unlockpt(primary) != 0) return "no pseudo-terminal";
  const int replica = ::open(::ptsname(primary), O_RDWR | O_NOCTTY);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(replica, STDERR_FILENO);
  draw();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(replica);
  ::fcntl(primary, F_SETFL, O_NONBLOCK);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(primary, buffer, sizeof(buffer))) > 0;) out.append(buffer, static_cast<size_t>(n));
  ::close(primary);
  return out;
}

TEST(ProgressBar, OnATerminalDrawsTheBarStepLossAndEtaInPlaceAndClearsItsLine) {
  const std::string clear_line = "\r\033[K";
  const std::string shown = on_a_terminal([] {
    ProgressBar bar(10);
    bar.update(3, 1.23456, 6.0);  // 2 s a step, 7 steps to go
    bar.clear();
  });
  const std::string drawn = clear_line + "[=========                     ] 3/10  loss 1.2346  ETA 0m14s";
  // The bar, then clear()'s and the destructor's (finish) line clears.
  EXPECT_EQ(shown, drawn + clear_line + clear_line);
}

TEST(ProgressBar, OffATerminalWritesNothing) {
  ::unsetenv("FSDPP_ATTACHED_TTY");
  testing::internal::CaptureStderr();
  {
    ProgressBar bar(10);
    bar.update(3, 1.0, 6.0);
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace fsdpp::train
