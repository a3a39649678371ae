// Link seams for the libFuzzer build of train_config_fuzz.cpp (suites/fuzz/CMakeLists.txt),
// which compiles harness/cli/train_command.cpp but not the trainer, the communicator or the
// launcher. TrainCommand::run calls them; the target never does (it stops at
// TrainConfig::validate), so each aborts if reached. cli::run_distributed replaces
// harness/cli/distributed.cpp's, made weak at build time, so that no launch code is linked.
// The main build (fuzz_brief) links the real functions instead.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/runtime/device.h"
#include "core/train/trainer.h"
#include "harness/cli/distributed.h"

namespace fsdpp {

namespace train {

RunInputs preflight(const TrainConfig&) {
  std::fprintf(stderr, "fuzz harness: train::preflight reached\n");
  std::abort();
}

TrainResult train(comm::Communicator&, const TrainConfig&, const RunInputs&, int, StepObserver*) {
  std::fprintf(stderr, "fuzz harness: train::train reached\n");
  std::abort();
}

}  // namespace train

namespace runtime {

// Only TrainCommand::run's default --device asks.
bool cuda_available() {
  std::fprintf(stderr, "fuzz harness: runtime::cuda_available reached\n");
  std::abort();
}

}  // namespace runtime

namespace comm {

// Only the rank lambda of TrainCommand::run, which never runs here, calls it.
int Communicator::rank() const {
  std::fprintf(stderr, "fuzz harness: Communicator::rank reached\n");
  std::abort();
}

}  // namespace comm

namespace cli {

int run_distributed(const std::vector<std::string>&, const DistributedFlags&, const RankMain&) {
  std::fprintf(stderr, "fuzz harness: run_distributed reached\n");
  std::abort();
}

}  // namespace cli

}  // namespace fsdpp
