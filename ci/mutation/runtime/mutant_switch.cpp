// The run-time switch of fsdpp's mutant schemata (ci/mutation/MUTATION.md). ci/mutation/mutate.py
// copies this file into its scratch copy of the tree as core/fsdpp_mutant_switch.cpp, outside
// the unity batches; every mutated file declares fsdpp_mutant_on and asks it at each site.
//   FSDPP_MUTANT=ID           the one mutant that is on in this process (none: every site keeps
//                             its original code)
//   FSDPP_MUTANT_TRACE=FILE   record the sites reached: one line "LABEL<TAB>ID" per site, the
//                             first time it is reached under each label (O_APPEND writes, so
//                             forked ranks and child processes add to the same file)
//   FSDPP_MUTANT_LABEL        the label a process starts with (a child process inherits the
//                             test that started it); fsdpp_mutant_set_label changes it
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kFsdppMutantMaxId = 1 << 16;

struct FsdppMutantState {
  int active = 0;
  int trace_fd = -1;
};

char fsdpp_mutant_label[512] = "";
std::atomic<unsigned> fsdpp_mutant_epoch{1};
std::atomic<unsigned> fsdpp_mutant_seen[kFsdppMutantMaxId];

const FsdppMutantState& fsdpp_mutant_state() {
  static const FsdppMutantState state = [] {
    FsdppMutantState s;
    if (const char* id = std::getenv("FSDPP_MUTANT")) s.active = std::atoi(id);
    const char* trace = std::getenv("FSDPP_MUTANT_TRACE");
    if (trace != nullptr && *trace != '\0') s.trace_fd = ::open(trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (const char* label = std::getenv("FSDPP_MUTANT_LABEL"))
      std::strncpy(fsdpp_mutant_label, label, sizeof fsdpp_mutant_label - 1);
    return s;
  }();
  return state;
}

}  // namespace

extern "C" void fsdpp_mutant_set_label(const char* label) noexcept {
  fsdpp_mutant_state();
  std::strncpy(fsdpp_mutant_label, label, sizeof fsdpp_mutant_label - 1);
  fsdpp_mutant_epoch.fetch_add(1);
  ::setenv("FSDPP_MUTANT_LABEL", label, 1);
}

extern "C" bool fsdpp_mutant_on(int id) noexcept {
  const FsdppMutantState& s = fsdpp_mutant_state();
  if (s.trace_fd >= 0 && id > 0 && id < kFsdppMutantMaxId) {
    unsigned epoch = fsdpp_mutant_epoch.load(std::memory_order_relaxed);
    if (fsdpp_mutant_seen[id].exchange(epoch) != epoch) {
      char line[600];
      int n = std::snprintf(line, sizeof line, "%s\t%d\n", fsdpp_mutant_label, id);
      if (n > 0) (void)!::write(s.trace_fd, line, static_cast<size_t>(n < 600 ? n : 599));
    }
  }
  return id == s.active;
}
