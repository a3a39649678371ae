#include "harness/cli/distributed.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <utility>

#include "core/runtime/host_memory.h"
#include "core/runtime/threads.h"
#include "harness/launch/launcher.h"
#include "harness/launch/run_ranks.h"

namespace fsdpp::cli {

void add_distributed_flags(CLI::App& command, DistributedFlags& flags) {
  command.add_option("--nproc", flags.nproc, "Spawn N local ranks running this command (like torchrun)")
      ->check(CLI::Range(1, 1024));
  command.add_option("--threads", flags.threads, "Intra-op threads per rank (default: cores / local ranks)")
      ->check(CLI::Range(1, 1024));
  command.add_flag("--bind-cores", flags.bind_cores,
                   "With --nproc: pin each rank to its own cores (threads-per-rank of them) and its OpenMP "
                   "threads to those cores (OMP_PROC_BIND=close, OMP_PLACES=threads unless set)");
  command.add_flag("--release-host-memory", flags.release_host_memory,
                   "Return freed large host blocks to the OS (glibc's default) instead of keeping them for the "
                   "next step (fsdpp's default: faster, the resident set keeps a step's peak)");
  command.add_option("--timeout-s", flags.timeout_s, "Limit for each collective, seconds")
      ->check(CLI::Range(0.1, 86400.0));
  command.add_option("--budget-s", flags.budget_s, "With --nproc: wall-clock limit for the whole run, seconds")
      ->check(CLI::Range(0.0, 1e7));
  command.add_option("--master-addr", flags.master_addr, "Overrides MASTER_ADDR");
  command.add_option("--master-port", flags.master_port, "Overrides MASTER_PORT")->check(CLI::Range(1, 65535));
}

namespace {

// --bind-cores: the launcher's own CPUs, sliced per rank (launcher.h rank_cpus); OpenMP
// binds each rank's threads inside its slice (a user's OMP_PROC_BIND / OMP_PLACES win).
struct CoreBinding {
  std::vector<int> allowed;
  int threads_per_rank = 1;
  std::vector<std::pair<std::string, std::string>> omp_env;

  void apply(int rank, harness::ProcessSpec& spec) const {
    spec.cpus = harness::rank_cpus(allowed, rank, threads_per_rank);
    spec.env.insert(spec.env.end(), omp_env.begin(), omp_env.end());
    spec.env.emplace_back("FSDPP_BOUND_CPUS", runtime::cpu_list_text(spec.cpus));  // the rank's world: line
  }
};

CoreBinding plan_core_binding(const DistributedFlags& flags, int nproc) {
  CoreBinding plan;
  plan.allowed = runtime::affinity_cpus();
  if (plan.allowed.empty()) throw std::runtime_error("--bind-cores: cannot read this process's CPU affinity");
  const std::string cpus = runtime::cpu_list_text(plan.allowed);
  // OpenMP binds the main thread of a process started with OMP_PROC_BIND to one place,
  // and that thread's mask is the only one there is to slice.
  const char* bind = std::getenv("OMP_PROC_BIND");
  if (bind != nullptr && std::string(bind) != "false")
    std::fprintf(stderr,
                 "fsdpp: warning: --bind-cores: OMP_PROC_BIND=%s is set for the launcher too; its OpenMP "
                 "may have narrowed the CPUs to slice to %s (unset it: the launcher sets it for the ranks)\n",
                 bind, cpus.c_str());
  plan.threads_per_rank = flags.threads > 0 ? flags.threads : runtime::default_threads_per_rank(nproc);
  if (static_cast<size_t>(nproc) * plan.threads_per_rank > plan.allowed.size())
    std::fprintf(stderr, "fsdpp: warning: --bind-cores: %d ranks x %d threads on CPUs %s: ranks share CPUs\n", nproc,
                 plan.threads_per_rank, cpus.c_str());
  using Variable = std::pair<const char*, const char*>;
  for (const auto& [name, value] : {Variable{"OMP_PROC_BIND", "close"}, Variable{"OMP_PLACES", "threads"}})
    if (std::getenv(name) == nullptr) plan.omp_env.emplace_back(name, value);
  return plan;
}

// Whether the ranks can be this launcher forked, without exec: each then skips LibTorch's
// start-up (its operator registry: about half a CPU-second per process, most of a small
// run's cost) and the command's preflight, whose results it inherits. Only where a forked
// rank is the same as an exec'd one:
//   - this process has one thread (process_thread_count: fork copies only the caller);
//   - the machine has no NVIDIA device (/dev/nvidiactl): a process that touched CUDA cannot
//     use it in a forked child, and the launcher may have asked for a device count;
//   - no --bind-cores: OpenMP reads OMP_PROC_BIND and OMP_PLACES when LibTorch loads;
//   - FSDPP_LAUNCH_EXEC is unset (or 0): set, every rank is exec'd, as on a GPU machine.
bool fork_ranks(const DistributedFlags& flags) {
  const char* exec = std::getenv("FSDPP_LAUNCH_EXEC");
  if (exec != nullptr && std::string(exec) != "0") return false;
  if (flags.bind_cores) return false;
  std::error_code error;
  if (std::filesystem::exists("/dev/nvidiactl", error)) return false;
  return harness::process_thread_count() == 1;
}

int launch_local(const std::vector<std::string>& argv, const DistributedFlags& flags, const RankMain& main) {
  int n = flags.nproc;
  int port = flags.master_port ? *flags.master_port : harness::reserve_free_port();
  std::string addr = flags.master_addr.value_or("127.0.0.1");
  std::vector<std::string> child_argv = argv;
  child_argv[0] = harness::self_executable();
  harness::LaunchOptions options;
  if (flags.budget_s > 0)
    options.budget = std::chrono::milliseconds(static_cast<int64_t>(flags.budget_s * 1000));
  else
    options.budget = std::chrono::hours(24 * 365);
  // A failed rank's peers learn of it from the failure board within about a second
  // (communicator.h) and exit naming it: give them that before stopping them.
  options.stop_grace = std::chrono::milliseconds(static_cast<int64_t>(std::min(flags.timeout_s, 10.0) * 1000));
  std::optional<CoreBinding> binding;
  if (flags.bind_cores) binding = plan_core_binding(flags, n);
  const bool fork = fork_ranks(flags);
  auto report = harness::launch(
      n,
      [&](int rank) {
        harness::ProcessSpec spec;
        spec.env = {{"RANK", std::to_string(rank)},
                    {"WORLD_SIZE", std::to_string(n)},
                    {"LOCAL_RANK", std::to_string(rank)},
                    {"LOCAL_WORLD_SIZE", std::to_string(n)},
                    {"MASTER_ADDR", addr},
                    {"MASTER_PORT", std::to_string(port)},
                    {"FSDPP_LAUNCH_CHILD", "1"},
                    // Ranks' output is piped through us; rank 0 may still draw a progress
                    // bar on the user's terminal (train/metrics_log.h).
                    {"FSDPP_ATTACHED_TTY", ::isatty(STDERR_FILENO) ? "1" : "0"}};
        if (binding) binding->apply(rank, spec);
        if (fork) {
          // The rank's environment as an exec'd rank has it, then the rank's side of
          // run_distributed (FSDPP_LAUNCH_CHILD is set).
          spec.child_main = [env = spec.env, &argv, &flags, &main](int status_fd) {
            for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
            ::setenv("FSDPP_STATUS_FD", std::to_string(status_fd).c_str(), 1);
            ::setenv("FSDPP_LAUNCH_FORKED", "1", 1);  // the rank's world: line says so
            return run_distributed(argv, flags, main);
          };
        } else {
          spec.argv = child_argv;
        }
        return spec;
      },
      options);
  if (!report.ok()) {
    std::fprintf(stderr, "fsdpp: %s\n", report.summary().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int run_distributed(const std::vector<std::string>& argv, const DistributedFlags& flags, const RankMain& main) {
  bool is_child = std::getenv("FSDPP_LAUNCH_CHILD") != nullptr;
  if (flags.nproc > 0 && !is_child) return launch_local(argv, flags, main);

  int status_fd = harness::status_fd_from_env();
  std::shared_ptr<comm::Communicator> communicator;
  try {
    comm::WorldOverrides overrides;
    overrides.master_addr = flags.master_addr;
    overrides.master_port = flags.master_port;
    auto world = comm::resolve_world(comm::process_env(), overrides);
    const char* bound = std::getenv("FSDPP_BOUND_CPUS");  // set by --bind-cores
    // A rank pinned by --bind-cores sees only its own slice of the cores
    // (runtime::available_cores()), so it alone must fit there.
    const int sharing = bound != nullptr ? 1 : world.local_world_size;
    int threads = flags.threads > 0 ? flags.threads : runtime::default_threads_per_rank(sharing);
    if (threads * sharing > runtime::available_cores()) {
      if (bound != nullptr)
        std::fprintf(stderr, "fsdpp: warning: %d threads exceed the %d cores bound to this rank\n", threads,
                     runtime::available_cores());
      else
        std::fprintf(stderr, "fsdpp: warning: %d local ranks x %d threads exceed the %d available cores\n",
                     world.local_world_size, threads, runtime::available_cores());
    }
    runtime::configure_threads(threads);
    if (!flags.release_host_memory && !runtime::keep_freed_host_memory() &&
        std::string(runtime::host_heap_policy()) == "glibc")
      std::fprintf(stderr, "fsdpp: warning: glibc refused the heap thresholds; freed host blocks go back to the OS\n");
    const bool forked = std::getenv("FSDPP_LAUNCH_FORKED") != nullptr;
    std::printf("%s threads=%d%s%s%s\n", world.describe().c_str(), threads, bound ? " cpus=" : "", bound ? bound : "",
                forked ? " launch=fork" : "");
    std::fflush(stdout);
    comm::CommOptions options;
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.timeout_s * 1000));
    communicator = comm::Communicator::connect(world, options);
    int code = main(*communicator, world);
    communicator->shutdown();
    harness::report_status(status_fd, code == 0 ? harness::Verdict::Ok : harness::Verdict::Failed,
                           code == 0 ? "" : "exit code " + std::to_string(code));
    return code;
  } catch (const std::exception& e) {
    return harness::fail_rank(e, communicator.get(), status_fd, "fsdpp: error: ");
  }
}

}  // namespace fsdpp::cli
