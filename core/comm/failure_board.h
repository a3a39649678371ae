// FailureBoard: where the ranks of a world leave word of a failure, so that the others can
// say which rank failed and why, instead of only that a connection closed.
//
// Every rank keeps its own client of the world's TCPStore (rank 0 hosts it) and writes its
// machine and pid there when it joins. Then, on a failure:
// - the rank where it began posts "rank R failed: <its message>" (post());
// - a rank whose collective failed asks the board (explain()): a posted failure, else a
//   peer on this machine whose process is gone, else the store itself gone (rank 0, its
//   host, died or is cut off), else which ranks it cannot check from here. What it
//   concluded about a gone peer is posted too, so ranks that ask later read the same;
// - a rank waiting in a collective reads the board every second (posted_failure()), so it
//   learns of a failure on a rank that is still alive (the store's host, lingering);
// - every failing rank signs out (leave()); the store's host waits for the others to sign
//   out, up to a linger, before it exits and takes the store with it.
// Every store operation runs under a deadline (the board's op timeout): a dead or cut-off
// store host never makes a failing rank hang. Once one operation missed its deadline the
// board counts the store as unreachable and stops asking.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/rendezvous.h"

namespace c10d {
class Store;
}

namespace fsdpp::comm {

// How long a failing store host waits, at most, for the other ranks to read the board and
// sign out (leave()); callers cap it at the collective timeout.
constexpr std::chrono::milliseconds kFailureLinger{3000};

class FailureBoard {
 public:
  // Connects this rank's board client to the world's store at world.master_addr:port
  // (the store must already be up) and records this rank's machine and pid. Returns
  // nullptr for a world of one, or when the store cannot be reached within op_timeout
  // (the run goes on; failures are then explained by the collectives' own messages).
  static std::shared_ptr<FailureBoard> join(const WorldSpec& world, std::chrono::milliseconds op_timeout);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // This rank failed on its own: posts "rank R failed: <message>" unless something was
  // already posted about it.
  void post_own_failure(const std::string& message);

  // "rank R failed: ..." (or "rank R is gone: ...") for the lowest other rank that has a
  // post, with the other posted ranks named; nullopt when none has or the store is gone.
  std::optional<std::string> posted_failure();

  // The best explanation of a failed collective, one clause without a final period (see
  // the header comment); never empty.
  std::string explain();

  // posted_failure(), else a peer on this machine whose process is gone: a cause known
  // for certain; nullopt when there is none (yet) or the store does not answer.
  std::optional<std::string> known_failure();

  // While the world connects: waits until every rank has joined the board, up to
  // `deadline` or until a failure is posted. Returns the ranks still missing then (empty:
  // all joined), or nullopt when the store stopped answering.
  std::optional<std::vector<int>> await_members(std::chrono::steady_clock::time_point deadline);

  // Posts "rank R <why> (seen by rank S)" about each of `ranks` that has no post yet, and
  // signs them out (they will never sign out themselves): for ranks that never arrived.
  void post_absent(const std::vector<int>& ranks, const std::string& why);

  // Records that this rank started (finished = false) or finished connecting group
  // `group`; without_connect_mark() lists which of `world_ranks` have no such record
  // (nullopt when the store does not answer).
  void mark_connect(const std::string& group, bool finished);
  std::optional<std::vector<int>> without_connect_mark(const std::string& group, bool finished,
                                                       const std::vector<int>& world_ranks);

  // This rank is about to exit after a failure: signs out, and on the store's host waits
  // until every rank signed out (or was posted as gone) or `linger` passed.
  void leave(std::chrono::milliseconds linger);

  // Runs op on the board's client under the op timeout; nullopt when it failed or missed
  // the deadline (the store then counts as unreachable). Public for tests.
  std::optional<std::string> run_bounded(const std::function<std::string(c10d::Store&)>& op);

  bool store_reachable() const { return !unreachable_->load(); }

 private:
  FailureBoard() = default;
  // Posts `text` about `rank` unless a post about it exists; true if this one was first.
  bool post(int rank, const std::string& text);
  // What a rank recorded about itself when it joined.
  struct Member {
    int rank = 0;
    bool signed_out = false;  // it left after a failure (leave())
    std::string machine;      // this_machine_id()
    long pid = 0;
    std::string host;
  };
  // The other ranks' records; nullopt when the store does not answer.
  std::optional<std::vector<Member>> other_members();
  std::optional<std::string> peer_gone_on_this_machine(const std::vector<Member>& members);
  // Which of `ranks` have no `key(rank)` in the store; nullopt when it does not answer.
  std::optional<std::vector<int>> ranks_without(const std::function<std::string(int)>& key,
                                                const std::vector<int>& ranks);

  int rank_ = 0;
  int world_size_ = 1;
  std::string store_address_;  // host:port, for messages
  std::chrono::milliseconds op_timeout_{};
  struct Client;                    // the store client, shared with detached operations
  std::shared_ptr<Client> client_;  // that outlive their deadline
  std::shared_ptr<std::atomic<bool>> unreachable_ = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> left_{false};
};

// The machine this process runs on, as far as its pids go: the kernel's boot id and the
// host name (containers or namespaces that name themselves apart count as other hosts).
std::string this_machine_id();

// "rank 2" or "ranks 0, 2, 3".
std::string ranks_phrase(const std::vector<int>& ranks);

// Whether process `pid` on this machine has exited (gone or a zombie).
bool process_is_gone(long pid);

}  // namespace fsdpp::comm
