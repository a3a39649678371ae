// The test labeller as an object of its own: linked into a suite binary built elsewhere (an
// unmutated build of the same commit), a static initialiser appends the listener that names each
// test to the mutant switch, as runtime/test_listener.inc does inside test_main.cpp.
#include <errno.h>
#include <gtest/gtest.h>

#include <string>

extern "C" void fsdpp_mutant_set_label(const char* label) noexcept;

namespace {

class FsdppMutantLabeler : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& info) override {
    std::string label = std::string(program_invocation_short_name) + ":" + info.test_suite_name() + "." + info.name();
    fsdpp_mutant_set_label(label.c_str());
  }
  void OnTestEnd(const ::testing::TestInfo&) override { fsdpp_mutant_set_label(""); }
};

const bool fsdpp_mutant_labeler_installed = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new FsdppMutantLabeler);
  return true;
}();

}  // namespace
