// The CLI's exit-code convention (README, exit codes): 0 success, 1 a failed run, 2 bad
// usage or input. UsageError carries the "2" cases that are found after parsing: an input
// file, model folder or value that a command checks before it starts any work.
#pragma once

#include <stdexcept>
#include <string>

namespace fsdpp::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr int kExitFailedRun = 1;
inline constexpr int kExitBadUsage = 2;

// Runs a command's input step (reading a model folder, a tokenizer, a data file) and
// turns its failure into a UsageError: the input, not the run, was bad.
template <class Step>
auto read_input(Step&& step) -> decltype(step()) {
  try {
    return step();
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(e.what());
  }
}

}  // namespace fsdpp::cli
