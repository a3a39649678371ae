// runtime::ProgressLine, the progress of data prepare, fsdpp eval and fsdpp train's
// evaluations: a line per tenth off a terminal, one line in place on one, and silence until
// quiet_s has passed (fsdpp train's evaluations: only a long one shows its progress).
#include "core/runtime/progress_line.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fsdpp {
namespace {

// What `drive` wrote through a ProgressLine on a memory stream (the line object destroyed).
template <typename Drive>
std::string written(double quiet_s, bool in_place, const Drive& drive) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&buffer, &size);
  {
    runtime::ProgressLine line("eval", "windows", quiet_s, out, in_place);
    drive(line);
  }
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

TEST(ProgressLine, OffATerminalPrintsALinePerTenthReached) {
  const auto text = written(0, false, [](runtime::ProgressLine& line) {
    for (int done = 1; done <= 4; ++done) line.update(done, 4, 0.5 * done, "x");
  });
  EXPECT_EQ(text,
            "eval:  20%  1/4 windows  x\n"
            "eval:  50%  2/4 windows  x\n"
            "eval:  70%  3/4 windows  x\n"
            "eval: 100%  4/4 windows  x\n");
}

TEST(ProgressLine, OnATerminalRewritesOneLineAndEndsIt) {
  const auto text = written(0, true, [](runtime::ProgressLine& line) {
    line.update(1, 2, 0.1, "a");
    line.update(2, 2, 0.2, "b");
  });
  EXPECT_EQ(text, "\reval: 1/2 windows  a   \reval: 2/2 windows  b   \n");
}

// Nothing before quiet_s; the first update after it prints the tenth reached (not each one
// passed meanwhile); a task that ends sooner prints nothing at all.
TEST(ProgressLine, StaysSilentUntilQuietSecondsHavePassed) {
  const auto long_task = written(5, false, [](runtime::ProgressLine& line) {
    line.update(3, 10, 4.9, "early");
    line.update(6, 10, 5.0, "late");
    line.update(10, 10, 8.0, "end");
  });
  EXPECT_EQ(long_task, "eval:  60%  6/10 windows  late\neval: 100%  10/10 windows  end\n");
  const auto short_task = written(5, true, [](runtime::ProgressLine& line) { line.update(10, 10, 1.0, "x"); });
  EXPECT_EQ(short_task, "");
}

}  // namespace
}  // namespace fsdpp
