#include "harness/launch/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/runtime/threads.h"

namespace fsdpp::harness {

using Clock = std::chrono::steady_clock;

const char* to_string(RankStatus status) {
  switch (status) {
    case RankStatus::Succeeded: return "succeeded";
    case RankStatus::Failed: return "failed";
    case RankStatus::ExitedEarly: return "exited early";
    case RankStatus::Crashed: return "crashed";
    case RankStatus::Killed: return "stopped by the launcher";
    case RankStatus::TimedOut: return "timed out";
  }
  return "?";
}

bool LaunchReport::ok() const {
  if (ranks.empty()) return false;
  for (const auto& r : ranks)
    if (r.status != RankStatus::Succeeded) return false;
  return true;
}

std::vector<int> LaunchReport::failed_ranks() const {
  std::vector<int> culprits, casualties;
  for (const auto& r : ranks) {
    if (r.status == RankStatus::Succeeded || r.status == RankStatus::Killed) continue;
    (r.comm_failure ? casualties : culprits).push_back(r.rank);
  }
  return culprits.empty() ? casualties : culprits;
}

std::string LaunchReport::summary() const {
  std::ostringstream os;
  int bad = 0;
  for (const auto& r : ranks) bad += r.status != RankStatus::Succeeded;
  if (bad == 0) {
    os << "all " << ranks.size() << " ranks succeeded in " << wall_s << " s";
    return os.str();
  }
  os << bad << " of " << ranks.size() << " ranks did not succeed (wall " << wall_s << " s"
     << (budget_exhausted ? ", budget exhausted" : "") << "):";
  for (const auto& r : ranks) {
    if (r.status == RankStatus::Succeeded) continue;
    os << "\n  rank " << r.rank << " " << to_string(r.status);
    if (r.status == RankStatus::Failed) os << " (exit " << r.exit_code << ")";
    if (r.signal != 0) os << " (signal " << r.signal << ")";
    os << " after " << r.ended_after_s << " s";
    if (!r.message.empty()) os << ": " << r.message;
    if (r.status != RankStatus::Killed && !r.output_tail.empty()) {
      os << "\n    last output:";
      for (const auto& line : r.output_tail) os << "\n    | " << line;
    }
  }
  return os.str();
}

void report_status(int status_fd, Verdict verdict, const std::string& message) {
  if (status_fd < 0) return;
  std::string line = verdict == Verdict::Ok       ? "ok"
                     : verdict == Verdict::Failed ? "fail " + message
                                                  : "commfail " + message;
  for (char& c : line)
    if (c == '\n') c = ' ';  // the verdict is one line
  line += '\n';
  ssize_t ignored = ::write(status_fd, line.data(), line.size());
  (void)ignored;
}

int status_fd_from_env() {
  const char* v = std::getenv("FSDPP_STATUS_FD");
  if (v == nullptr) return -1;
  return std::atoi(v);
}

int reserve_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("reserve_free_port: socket() failed: " + std::string(strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("reserve_free_port: bind failed: " + std::string(strerror(errno)));
  }
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::vector<int> rank_cpus(const std::vector<int>& allowed, int local_rank, int threads_per_rank) {
  if (allowed.empty()) throw std::invalid_argument("rank_cpus: no CPUs to pin ranks to");
  if (threads_per_rank < 1 || local_rank < 0)
    throw std::invalid_argument("rank_cpus: rank " + std::to_string(local_rank) + " with " +
                                std::to_string(threads_per_rank) + " threads: expected rank >= 0, threads >= 1");
  const size_t count = allowed.size();
  const size_t take = std::min(count, static_cast<size_t>(threads_per_rank));
  const size_t first = static_cast<size_t>(local_rank) * static_cast<size_t>(threads_per_rank);
  std::vector<int> cpus;
  for (size_t j = 0; j < take; ++j) cpus.push_back(allowed[(first + j) % count]);
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

int process_thread_count() {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator it("/proc/self/task", error), end; !error && it != end; it.increment(error))
    ++count;
  return error ? 0 : count;
}

std::string self_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  buf[n] = '\0';
  return runnable_executable(buf, static_cast<int>(::getpid()));
}

std::string runnable_executable(const std::string& exe_link_target, int pid) {
  // The kernel marks the link of an unlinked executable with this suffix.
  const std::string deleted = " (deleted)";
  const std::string& path = exe_link_target;
  if (path.size() > deleted.size() && path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0)
    return "/proc/" + std::to_string(pid) + "/exe";
  return path;
}

namespace {

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;     // merged stdout+stderr
  int status_fd = -1;  // verdict pipe
  std::string partial_line;
  std::string status_text;
  std::deque<std::string> tail;
  bool running = true;
  enum class KillReason { None, Teardown, Budget } killed_by_us = KillReason::None;
  RankResult result;
};

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// In the forked child: pin it to `cpus` (see ProcessSpec::cpus); false with errno on failure.
bool bind_child(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      errno = EINVAL;
      return false;
    }
    CPU_SET(cpu, &set);
  }
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

[[noreturn]] void exec_child(const ProcessSpec& spec, int status_write) {
  for (const auto& [k, v] : spec.env) ::setenv(k.c_str(), v.c_str(), 1);
  ::setenv("FSDPP_STATUS_FD", std::to_string(status_write).c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : spec.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  std::fprintf(stderr, "launcher: cannot exec %s: %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}

Child start_child(int rank, const ProcessSpec& spec, const std::vector<int>& parent_fds) {
  int out_pipe[2], status_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(status_pipe) != 0)
    throw std::runtime_error("launcher: pipe() failed: " + std::string(std::strerror(errno)));
  std::fflush(stdout);
  std::fflush(stderr);
  std::cout.flush();
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("launcher: fork() failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(125);  // the launcher is already gone
    // A peer that died must surface as an error on the socket write (EPIPE), which the
    // communicator turns into a CommError naming the op, not as a silent SIGPIPE death.
    ::signal(SIGPIPE, SIG_IGN);
    for (int fd : parent_fds) ::close(fd);
    ::close(out_pipe[0]);
    ::close(status_pipe[0]);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(out_pipe[1], STDERR_FILENO);
    ::close(out_pipe[1]);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (!spec.cpus.empty() && !bind_child(spec.cpus)) {
      std::string message = "launcher: cannot pin rank " + std::to_string(rank) + " to CPUs " +
                            runtime::cpu_list_text(spec.cpus) + ": " + std::strerror(errno);
      std::fprintf(stderr, "%s\n", message.c_str());
      report_status(status_pipe[1], Verdict::Failed, message);
      ::_exit(126);
    }
    int code = 0;
    if (spec.child_main) {
      try {
        code = spec.child_main(status_pipe[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "uncaught exception: %s\n", e.what());
        report_status(status_pipe[1], Verdict::Failed, e.what());
        code = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    exec_child(spec, status_pipe[1]);
  }
  ::close(out_pipe[1]);
  ::close(status_pipe[1]);
  set_nonblocking(out_pipe[0]);
  set_nonblocking(status_pipe[0]);
  Child c;
  c.rank = rank;
  c.pid = pid;
  c.out_fd = out_pipe[0];
  c.status_fd = status_pipe[0];
  c.result.rank = rank;
  return c;
}

// Reads whatever is available; returns false at end of file.
bool drain(int fd, const std::function<void(const char*, size_t)>& sink) {
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      sink(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return true;  // EAGAIN: nothing more for now
  }
}

}  // namespace

LaunchReport launch(int num_ranks, const std::function<ProcessSpec(int rank)>& spec_for_rank,
                    const LaunchOptions& options) {
  if (num_ranks < 1) throw std::invalid_argument("launch: number of ranks must be >= 1");
  auto t0 = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::vector<Child> children;
  std::vector<int> parent_fds;
  for (int r = 0; r < num_ranks; ++r) {
    children.push_back(start_child(r, spec_for_rank(r), parent_fds));
    parent_fds.push_back(children.back().out_fd);
    parent_fds.push_back(children.back().status_fd);
  }

  auto on_output = [&](Child& c, const char* data, size_t n) {
    c.partial_line.append(data, n);
    size_t pos;
    while ((pos = c.partial_line.find('\n')) != std::string::npos) {
      std::string line = c.partial_line.substr(0, pos);
      c.partial_line.erase(0, pos + 1);
      if (options.echo_output) std::printf("[rank %d] %s\n", c.rank, line.c_str());
      c.tail.push_back(line);
      if (c.tail.size() > options.tail_lines) c.tail.pop_front();
    }
  };
  auto pump = [&](Child& c) {
    if (c.out_fd >= 0 && !drain(c.out_fd, [&](const char* d, size_t n) { on_output(c, d, n); })) {
      ::close(c.out_fd);
      c.out_fd = -1;
    }
    // Ranks' lines must reach a log file as they happen, not when the launch ends.
    if (options.echo_output) std::fflush(stdout);
    if (c.status_fd >= 0 && !drain(c.status_fd, [&](const char* d, size_t n) { c.status_text.append(d, n); })) {
      ::close(c.status_fd);
      c.status_fd = -1;
    }
  };

  auto deadline = t0 + options.budget;
  bool tearing_down = false;
  Clock::time_point stop_at{};
  std::string stop_reason;  // SIGTERM to the ranks still running (after stop_grace)
  bool stop_sent = false;
  Clock::time_point kill_at{};
  LaunchReport report;

  auto finish = [&](Child& c, int wstatus) {
    c.running = false;
    pump(c);
    if (!c.partial_line.empty()) on_output(c, "\n", 1);
    RankResult& r = c.result;
    r.ended_after_s = seconds();
    std::string verdict = c.status_text.substr(0, c.status_text.find('\n'));
    bool said_ok = verdict == "ok";
    if (verdict.rfind("fail ", 0) == 0) r.message = verdict.substr(5);
    if (verdict.rfind("commfail ", 0) == 0) {
      r.message = verdict.substr(9);
      r.comm_failure = true;
    }
    if (WIFEXITED(wstatus)) {
      r.exit_code = WEXITSTATUS(wstatus);
      if (r.exit_code == 0)
        r.status = said_ok ? RankStatus::Succeeded : RankStatus::ExitedEarly;
      else
        r.status = RankStatus::Failed;
      if (r.status == RankStatus::ExitedEarly)
        r.message = "exited with status 0 before finishing its work (it never reported success)";
      if (r.status == RankStatus::Failed && r.message.empty())
        r.message = "exited with status " + std::to_string(r.exit_code);
    } else if (WIFSIGNALED(wstatus)) {
      r.signal = WTERMSIG(wstatus);
      // A rank that died of its own signal before ours arrived crashed, whatever we sent.
      using K = Child::KillReason;
      bool ours = r.signal == SIGTERM || r.signal == SIGKILL;
      r.status = !ours || c.killed_by_us == K::None ? RankStatus::Crashed
                 : c.killed_by_us == K::Budget      ? RankStatus::TimedOut
                                                    : RankStatus::Killed;
      if (r.status == RankStatus::Crashed) r.message = std::string("killed by signal ") + strsignal(r.signal);
    }
    if (r.status != RankStatus::Succeeded && r.status != RankStatus::Killed && r.status != RankStatus::TimedOut &&
        options.kill_all_on_failure && !tearing_down) {
      // Like torchrun's agent: one failure ends the whole group, after stop_grace in
      // which the others may exit on their own (naming the failed rank).
      tearing_down = true;
      stop_at = Clock::now() + options.stop_grace;
      stop_reason = "stopped after rank " + std::to_string(c.rank) + " " + to_string(r.status);
    }
  };

  for (;;) {
    int running = 0;
    std::vector<pollfd> fds;
    for (auto& c : children) {
      if (c.running) ++running;
      if (c.out_fd >= 0) fds.push_back({c.out_fd, POLLIN, 0});
      if (c.status_fd >= 0) fds.push_back({c.status_fd, POLLIN, 0});
    }
    if (running == 0) break;
    ::poll(fds.data(), fds.size(), 20);
    for (auto& c : children) {
      pump(c);
      if (!c.running) continue;
      int wstatus = 0;
      pid_t done = ::waitpid(c.pid, &wstatus, WNOHANG);
      if (done == c.pid) finish(c, wstatus);
    }
    auto now = Clock::now();
    if (!report.budget_exhausted && now >= deadline) {
      report.budget_exhausted = true;
      for (auto& c : children)
        if (c.running && c.killed_by_us == Child::KillReason::None) {
          c.killed_by_us = Child::KillReason::Budget;
          c.result.message = "had not finished when the " +
                             std::to_string(static_cast<double>(options.budget.count()) / 1000.0).substr(0, 6) +
                             " s budget ran out";
          ::kill(c.pid, SIGKILL);
        } else if (c.running) {
          ::kill(c.pid, SIGKILL);
        }
    }
    if (tearing_down && !stop_sent && now >= stop_at) {
      stop_sent = true;
      kill_at = now + options.kill_grace;
      for (auto& other : children)
        if (other.running && other.killed_by_us == Child::KillReason::None) {
          other.killed_by_us = Child::KillReason::Teardown;
          other.result.message = stop_reason;
          ::kill(other.pid, SIGTERM);
        }
    }
    if (tearing_down && stop_sent && now >= kill_at)
      for (auto& c : children)
        if (c.running) ::kill(c.pid, SIGKILL);
  }
  for (auto& c : children) {
    if (c.out_fd >= 0) ::close(c.out_fd);
    if (c.status_fd >= 0) ::close(c.status_fd);
    c.result.output_tail.assign(c.tail.begin(), c.tail.end());
    report.ranks.push_back(c.result);
  }
  std::fflush(stdout);
  report.wall_s = seconds();
  return report;
}

}  // namespace fsdpp::harness
