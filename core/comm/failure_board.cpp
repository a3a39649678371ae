#include "core/comm/failure_board.h"

#include <c10/util/Logging.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill(), which <csignal> does not declare
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

#include "core/comm/deadline.h"

namespace fsdpp::comm {

struct FailureBoard::Client {
  std::mutex mu;  // one operation at a time on the client's connection
  c10::intrusive_ptr<c10d::TCPStore> store;
};

namespace {

const std::string kBoardPrefix = "fsdpp/board/";
std::string member_key(int rank) { return kBoardPrefix + "member/" + std::to_string(rank); }
std::string connect_key(const std::string& group, bool finished, int rank) {
  return kBoardPrefix + "connect/" + group + (finished ? "/finished/" : "/started/") + std::to_string(rank);
}
std::string failed_key(int rank) { return kBoardPrefix + "failed/" + std::to_string(rank); }
std::string signed_out_key(int rank) { return kBoardPrefix + "signed-out/" + std::to_string(rank); }
const std::string kPostsKey = kBoardPrefix + "posts";  // counts posts: one read tells whether to scan
const std::string kLeftKey = kBoardPrefix + "left";    // ranks that signed out after a failure
// How long explain() keeps looking for a peer's pid to be gone before it gives up.
constexpr std::chrono::milliseconds kGoneSettle{1000};

std::string to_text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> to_bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// On the failure path the store's host may be gone, and c10d's client then logs a warning
// with a C++ stack trace for every refused operation: a failing rank ends with its one
// line instead. Errors still print.
void quiet_store_warnings() { FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, c10::GLOG_ERROR); }

}  // namespace

std::string ranks_phrase(const std::vector<int>& ranks) {
  std::string text = ranks.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text;
}

std::string this_machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(in >> id) || id.empty()) id = "no-boot-id";
  return id + "/" + host_name();
}

bool process_is_gone(long pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  // Exited but not yet reaped by its parent: state Z (or X) in /proc/<pid>/stat, after the
  // command name in parentheses.
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  char state = stat[close + 2];
  return state == 'Z' || state == 'X';
}

std::shared_ptr<FailureBoard> FailureBoard::join(const WorldSpec& world, std::chrono::milliseconds op_timeout) {
  if (world.world_size < 2) return nullptr;
  std::shared_ptr<FailureBoard> board(new FailureBoard());
  board->rank_ = world.rank;
  board->world_size_ = world.world_size;
  board->store_address_ = world.master_addr + ":" + std::to_string(world.master_port);
  board->op_timeout_ = op_timeout;
  board->client_ = std::make_shared<Client>();
  auto client = board->client_;
  std::string host = world.master_addr;
  int port = world.master_port;
  bool connected = false;
  try {
    connected = with_deadline<bool>(
                    [client, host, port, op_timeout] {
                      c10d::TCPStoreOptions options;
                      options.port = static_cast<std::uint16_t>(port);
                      options.isServer = false;
                      options.waitWorkers = false;
                      options.timeout = op_timeout;
                      auto store = c10::make_intrusive<c10d::TCPStore>(host, options);
                      std::lock_guard<std::mutex> lock(client->mu);
                      client->store = store;
                      return true;
                    },
                    op_timeout)
                    .value_or(false);
  } catch (const std::exception&) {
  }
  if (!connected) return nullptr;
  std::string me = this_machine_id() + " " + std::to_string(::getpid()) + " " + host_name();
  int rank = world.rank;
  if (!board->run_bounded([rank, me](c10d::Store& s) {
        s.set(member_key(rank), to_bytes(me));
        return std::string();
      }))
    return nullptr;
  return board;
}

std::optional<std::string> FailureBoard::run_bounded(const std::function<std::string(c10d::Store&)>& op) {
  if (unreachable_->load()) return std::nullopt;
  auto client = client_;
  std::optional<std::string> result;
  try {
    result = with_deadline<std::string>(
        [client, op] {
          std::lock_guard<std::mutex> lock(client->mu);
          return op(*client->store);
        },
        op_timeout_);
  } catch (const std::exception&) {
  }
  if (!result) unreachable_->store(true);
  return result;
}

bool FailureBoard::post(int rank, const std::string& text) {
  auto stored = run_bounded([rank, text](c10d::Store& s) {
    auto now = to_text(s.compareSet(failed_key(rank), {}, to_bytes(text)));
    if (now == text) s.add(kPostsKey, 1);
    return now;
  });
  return stored && *stored == text;
}

void FailureBoard::post_own_failure(const std::string& message) {
  quiet_store_warnings();
  post(rank_, "rank " + std::to_string(rank_) + " failed: " + message);
}

std::optional<std::string> FailureBoard::posted_failure() {
  int me = rank_;
  int n = world_size_;
  auto found = run_bounded([me, n](c10d::Store& s) {
    if (s.add(kPostsKey, 0) == 0) return std::string();
    std::string first;
    std::vector<int> others;
    for (int r = 0; r < n; ++r) {
      if (r == me || !s.check({failed_key(r)})) continue;
      if (first.empty())
        first = to_text(s.get(failed_key(r)));
      else
        others.push_back(r);
    }
    if (!first.empty() && !others.empty()) first += " (" + ranks_phrase(others) + " too)";
    return first;
  });
  if (!found || found->empty()) return std::nullopt;
  return found;
}

std::optional<std::vector<FailureBoard::Member>> FailureBoard::other_members() {
  int me = rank_;
  int n = world_size_;
  auto text = run_bounded([me, n](c10d::Store& s) {
    std::string all;
    for (int r = 0; r < n; ++r)
      if (r != me && s.check({member_key(r)}))
        all += std::to_string(r) + " " + (s.check({signed_out_key(r)}) ? "1 " : "0 ") + to_text(s.get(member_key(r))) +
               "\n";
    return all;
  });
  if (!text) return std::nullopt;
  // One line per rank: "<rank> <signed out> <machine id> <pid> <host name>" (join() wrote
  // the last three).
  std::vector<Member> members;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    Member m;
    if (in >> m.rank >> m.signed_out >> m.machine >> m.pid >> m.host) members.push_back(m);
  }
  return members;
}

std::optional<std::string> FailureBoard::peer_gone_on_this_machine(const std::vector<Member>& members) {
  const std::string machine = this_machine_id();
  for (const auto& m : members) {
    // A rank that signed out left after a failure it reported (or was told of): a
    // casualty, not the cause.
    if (m.signed_out || m.machine != machine || !process_is_gone(m.pid)) continue;
    // It may have signed out after `members` was read: now that it is gone, a re-read is
    // final.
    int rank = m.rank;
    auto signed_out = run_bounded([rank](c10d::Store& s) { return s.check({signed_out_key(rank)}) ? "1" : ""; });
    if (signed_out && !signed_out->empty()) continue;
    // It may have posted the cause just before it exited.
    if (auto posted = posted_failure()) return posted;
    std::string text = "rank " + std::to_string(m.rank) + " (pid " + std::to_string(m.pid) + " on " + m.host +
                       ") is gone: it exited or was killed without reporting an error (seen by rank " +
                       std::to_string(rank_) + ")";
    // First to notice signs the gone rank out, so the store's host need not wait for it.
    if (post(m.rank, text)) run_bounded([](c10d::Store& s) { return std::to_string(s.add(kLeftKey, 1)); });
    return posted_failure().value_or(text);
  }
  return std::nullopt;
}

std::string FailureBoard::explain() {
  quiet_store_warnings();
  if (auto posted = posted_failure()) return *posted;
  const auto members = store_reachable() ? other_members() : std::nullopt;
  if (!members) {
    if (rank_ == 0) return "the TCPStore this rank hosts at " + store_address_ + " does not answer";
    return "rank 0 is gone or cut off: the TCPStore it hosts at " + store_address_ + " does not answer";
  }
  if (auto gone = peer_gone_on_this_machine(*members)) return *gone;
  // A killed process closes its sockets before it becomes a zombie: the collective may
  // fail a moment before its pid reads as gone.
  for (auto until = std::chrono::steady_clock::now() + kGoneSettle; std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (auto gone = peer_gone_on_this_machine(*members)) return *gone;
  }
  // Nothing known: name the ranks that cannot be checked from here.
  const std::string machine = this_machine_id();
  std::vector<int> remote;
  std::string remote_hosts;
  for (const auto& m : *members) {
    if (m.machine == machine) continue;
    remote.push_back(m.rank);
    if (remote_hosts.find(m.host) == std::string::npos) remote_hosts += (remote_hosts.empty() ? "" : ", ") + m.host;
  }
  if (remote.empty()) return "no rank has reported a failure and every rank is still running";
  return "no rank has reported a failure and every rank on this machine is still running; " + ranks_phrase(remote) +
         " on " + remote_hosts + " cannot be checked from here";
}

std::optional<std::string> FailureBoard::known_failure() {
  quiet_store_warnings();
  if (auto posted = posted_failure()) return posted;
  auto members = other_members();
  if (!members) return std::nullopt;
  return peer_gone_on_this_machine(*members);
}

std::optional<std::vector<int>> FailureBoard::ranks_without(const std::function<std::string(int)>& key,
                                                            const std::vector<int>& ranks) {
  auto missing = run_bounded([key, ranks](c10d::Store& s) {
    std::string list;
    for (int r : ranks)
      if (!s.check({key(r)})) list += std::to_string(r) + " ";
    return list;
  });
  if (!missing) return std::nullopt;
  std::vector<int> found;
  std::istringstream in(*missing);
  for (int r; in >> r;) found.push_back(r);
  return found;
}

std::optional<std::vector<int>> FailureBoard::await_members(std::chrono::steady_clock::time_point deadline) {
  std::vector<int> everyone(world_size_);
  std::iota(everyone.begin(), everyone.end(), 0);
  for (;;) {
    auto missing = ranks_without(member_key, everyone);
    if (!missing || missing->empty() || std::chrono::steady_clock::now() >= deadline || posted_failure())
      return missing;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void FailureBoard::post_absent(const std::vector<int>& ranks, const std::string& why) {
  for (int r : ranks)
    if (post(r, "rank " + std::to_string(r) + " " + why + " (seen by rank " + std::to_string(rank_) + ")"))
      run_bounded([](c10d::Store& s) { return std::to_string(s.add(kLeftKey, 1)); });
}

void FailureBoard::mark_connect(const std::string& group, bool finished) {
  int me = rank_;
  run_bounded([group, finished, me](c10d::Store& s) {
    s.set(connect_key(group, finished, me), to_bytes("1"));
    return std::string();
  });
}

std::optional<std::vector<int>> FailureBoard::without_connect_mark(const std::string& group, bool finished,
                                                                   const std::vector<int>& world_ranks) {
  return ranks_without([group, finished](int r) { return connect_key(group, finished, r); }, world_ranks);
}

void FailureBoard::leave(std::chrono::milliseconds linger) {
  if (left_.exchange(true)) return;
  quiet_store_warnings();
  int me = rank_;
  run_bounded([me](c10d::Store& s) {
    s.set(signed_out_key(me), to_bytes("1"));
    return std::to_string(s.add(kLeftKey, 1));
  });
  if (rank_ != 0) return;
  auto deadline = std::chrono::steady_clock::now() + linger;
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = run_bounded([](c10d::Store& s) { return std::to_string(s.add(kLeftKey, 0)); });
    if (!left || std::stoll(*left) >= world_size_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace fsdpp::comm
