// Starts N rank processes, supervises them and reports how each one ended.
//
// Every rank's stdout and stderr are captured line by line, echoed with a "[rank r] "
// prefix and kept (the last lines) for the report. Like torchrun's agent, the first rank
// that fails makes the launcher stop the others (after LaunchOptions::stop_grace, SIGTERM,
// then SIGKILL after a grace period), and one wall-clock budget bounds the whole group: when it runs out, every rank
// still running is killed and reported as timed out. Nothing is left running: ranks also
// die with the launcher (PR_SET_PDEATHSIG).
//
// A rank reports success by writing "ok" to its status pipe (fd in FSDPP_STATUS_FD for
// exec'd ranks) before exiting 0; a rank that exits 0 without it "exited early".
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fsdpp::harness {

enum class RankStatus {
  Succeeded,    // wrote "ok" and exited 0
  Failed,       // exited non-zero (message from its status pipe, if any)
  ExitedEarly,  // exited 0 without reporting success
  Crashed,      // killed by a signal the launcher did not send
  Killed,       // stopped by the launcher because another rank failed
  TimedOut,     // still running when the budget ran out
};
const char* to_string(RankStatus status);

struct RankResult {
  int rank = 0;
  RankStatus status = RankStatus::TimedOut;
  int exit_code = -1;   // when it exited
  int signal = 0;       // when a signal ended it
  std::string message;  // the rank's own failure message, if it sent one
  // It failed because a collective failed (a peer vanished or timed out): a casualty of
  // another rank's failure rather than its cause, unless every failure is of this kind.
  bool comm_failure = false;
  std::vector<std::string> output_tail;
  double ended_after_s = 0;  // since launch
};

struct LaunchReport {
  std::vector<RankResult> ranks;
  double wall_s = 0;
  bool budget_exhausted = false;

  bool ok() const;
  // The culprits: ranks that failed on their own (Failed other than by a collective
  // error, ExitedEarly, Crashed, TimedOut), not the ranks the launcher stopped or whose
  // collectives failed because of them. When every failure is a collective error (e.g.
  // a timeout), those ranks.
  std::vector<int> failed_ranks() const;
  // One paragraph: what happened to every rank that did not succeed, with its last lines.
  std::string summary() const;
};

struct LaunchOptions {
  std::chrono::milliseconds budget{std::chrono::minutes(2)};
  bool kill_all_on_failure = true;
  // After the first failure, how long the others may take to exit on their own (a rank
  // whose peer failed learns of it from the failure board and exits naming it) before
  // they get SIGTERM; then SIGKILL after kill_grace.
  std::chrono::milliseconds stop_grace{0};
  std::chrono::milliseconds kill_grace{std::chrono::seconds(2)};
  bool echo_output = true;
  size_t tail_lines = 40;
};

// How one rank starts: either a function run in a forked child (its return value is the
// exit code; status_fd is its status pipe) or a program to exec with extra environment.
struct ProcessSpec {
  std::function<int(int status_fd)> child_main;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  // Non-empty: the child may run on these CPUs only (sched_setaffinity after fork, so
  // every thread it starts inherits them). A CPU it may not use fails the rank.
  std::vector<int> cpus;
};

// The CPUs of local rank `local_rank` when each rank is pinned to `threads_per_rank` of
// `allowed` (ascending): consecutive slices, rank r gets allowed[r*t .. r*t+t-1], wrapping
// around when ranks x threads exceed allowed.size() (ranks then share CPUs). Like Intel's
// `torch.backends.xeon.run_cpu --ncores-per-instance`: one rank's threads stay on its own
// cores instead of migrating onto a neighbour's. Throws std::invalid_argument when
// `allowed` is empty or threads_per_rank < 1.
std::vector<int> rank_cpus(const std::vector<int>& allowed, int local_rank, int threads_per_rank);

// The number of threads of this process (/proc/self/task); 0 when it cannot be read.
// fork() copies only the calling thread, so a child that goes on running the program
// (ProcessSpec::child_main) is safe only from a process of one thread: a lock another
// thread held (malloc's, OpenMP's pool) would stay held in the child forever.
int process_thread_count();

LaunchReport launch(int num_ranks, const std::function<ProcessSpec(int rank)>& spec_for_rank,
                    const LaunchOptions& options);

// Writes the rank's verdict to its status pipe: "ok", "fail <message>", or
// "commfail <message>" when a collective failed. No-op for fd < 0. Used by forked bodies
// and by exec'd ranks (fd from FSDPP_STATUS_FD).
enum class Verdict { Ok, Failed, CommFailed };
void report_status(int status_fd, Verdict verdict, const std::string& message = "");
int status_fd_from_env();

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
int reserve_free_port();

// A path that runs this process's own executable: its absolute path (/proc/self/exe), or,
// when that file was replaced or removed since the process started (a rebuild during a
// long `fsdpp bench`), /proc/<pid>/exe, which still runs the image this process runs as
// long as it lives. Ranks and benchmark cells so always run the same build as their parent.
std::string self_executable();
// That rule for process `pid` whose /proc/<pid>/exe link reads `exe_link_target`.
std::string runnable_executable(const std::string& exe_link_target, int pid);

}  // namespace fsdpp::harness
