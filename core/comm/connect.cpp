#include "core/comm/connect.h"

#include <arpa/inet.h>
#include <c10/util/Logging.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/comm/communicator.h"
#include "core/comm/deadline.h"
#include "core/comm/group_state.h"

namespace fsdpp::comm {

using Clock = std::chrono::steady_clock;

namespace {

// How often a rank that waits for a group to connect reads the failure board.
constexpr std::chrono::milliseconds kConnectPoll{1000};

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

std::string since(Clock::time_point start) {
  return ms_text(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start));
}

// c10d's client retries a refused connection until its timeout and logs a warning with a
// C++ stack trace for each retry: a rank waiting for a late or dead rank 0 says so once,
// in its own error, instead. Errors still print.
class QuietStoreWarnings {
 public:
  QuietStoreWarnings() : saved_(FLAGS_caffe2_log_level) { FLAGS_caffe2_log_level = std::max(saved_, c10::GLOG_ERROR); }
  ~QuietStoreWarnings() { FLAGS_caffe2_log_level = saved_; }
  QuietStoreWarnings(const QuietStoreWarnings&) = delete;
  QuietStoreWarnings& operator=(const QuietStoreWarnings&) = delete;

 private:
  decltype(FLAGS_caffe2_log_level) saved_;
};

// The TCPStore's listening socket when the master address is loopback: bound to
// 127.0.0.1 only, so the store is not reachable from other machines (c10d's own server
// listens on every interface). Returns the bound socket's fd; the store takes it over.
int loopback_listen_fd(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw CommError(std::string("fsdpp comm: rank 0 could not create the TCPStore's socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    int error = errno;
    ::close(fd);
    throw CommError("fsdpp comm: rank 0 could not listen on 127.0.0.1:" + std::to_string(port) +
                    " for the TCPStore: " + std::strerror(error));
  }
  return fd;
}

// This machine's address on the route to host:port (a UDP socket "connected" there sends
// nothing), or "" if there is none. Gloo listens on it: it is where peers that reach the
// master can reach this rank too, while the host name may resolve to loopback (Debian's
// /etc/hosts maps it to 127.0.1.1) and leave other machines unable to connect.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return "";
  std::string local;
  for (auto* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage mine{};
    socklen_t length = sizeof(mine);
    char text[INET6_ADDRSTRLEN] = {};
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &length) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&mine), length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) == 0)
      local = text;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return local;
}

// Joins the TCPStore at host:options.port as a client, giving up after the timeout (and a
// second: c10d's own connect timeout is the same). Returns null when it could not, with
// error ": <c10d's first line>" when c10d said why. c10d's retry warnings are silenced.
c10::intrusive_ptr<c10d::TCPStore> join_as_client(const std::string& host, const c10d::TCPStoreOptions& options,
                                                  std::chrono::milliseconds timeout, std::string& error) {
  QuietStoreWarnings quiet;
  try {
    auto store = with_deadline<c10::intrusive_ptr<c10d::TCPStore>>(
        [host, options] { return c10::make_intrusive<c10d::TCPStore>(host, options); },
        timeout + std::chrono::seconds(1));
    if (store) return *store;
  } catch (const std::exception& e) {
    error = ": " + first_line_of(e.what());
  }
  return {};
}

// torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True): the agent hosts a TCPStore at
// MASTER_ADDR:MASTER_PORT, so rank 0 cannot host fsdpp's there. As in PyTorch's env://
// rendezvous every rank joins the agent's store as a client; rank 0 hosts fsdpp's store on a
// port of its own and publishes "host port" under a key of this attempt (a restarted attempt
// of an elastic run must not read the last one's), where the other ranks read it. The
// agent's store may be on another machine than rank 0 (torchrun's c10d rendezvous).
std::string published_store_key(const WorldSpec& world) {
  return "fsdpp/attempt_" + std::to_string(world.restart_count) + "/store";
}

std::string agent_store_where(const WorldSpec& world) {
  return "torchrun's agent store at " + world.master_addr + ":" + std::to_string(world.master_port);
}

c10::intrusive_ptr<c10d::TCPStore> join_agent_store(const WorldSpec& world, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(world.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  std::string error;
  auto store = join_as_client(world.master_addr, options, timeout, error);
  if (!store)
    throw CommError("fsdpp comm: rank " + std::to_string(world.rank) + " could not join " + agent_store_where(world) +
                    " within " + ms_text(timeout) + " (TORCHELASTIC_USE_AGENT_STORE=True)" + error);
  return store;
}

// Where rank 0 hosts fsdpp's store: loopback for a loopback master, else this machine's
// address on the route to the agent's store (reachable from wherever that is reachable).
std::string own_store_host(const WorldSpec& world) {
  if (is_loopback_address(world.master_addr)) return "127.0.0.1";
  std::string local = local_address_towards(world.master_addr, world.master_port);
  if (local.empty())
    throw CommError("fsdpp comm: rank 0 found no address of its own on the route to " + agent_store_where(world) +
                    " to host fsdpp's store on");
  return local;
}

void publish_store(const c10::intrusive_ptr<c10d::TCPStore>& store, const WorldSpec& hosted,
                   std::chrono::milliseconds timeout) {
  std::string key = published_store_key(hosted);
  std::string value = hosted.master_addr + " " + std::to_string(hosted.master_port);
  auto done = with_deadline<bool>(
      [store, key, value] {
        store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
        return true;
      },
      timeout);
  if (!done)
    throw CommError("fsdpp comm: rank 0 could not publish its store's address in torchrun's agent store within " +
                    ms_text(timeout));
}

WorldSpec read_published_store(const c10::intrusive_ptr<c10d::TCPStore>& store, const WorldSpec& given,
                               std::chrono::milliseconds timeout) {
  std::string key = published_store_key(given);
  std::optional<std::string> value;
  try {
    value = with_deadline<std::string>(
        [store, key, timeout] {
          store->wait({key}, timeout);
          auto bytes = store->get(key);
          return std::string(bytes.begin(), bytes.end());
        },
        timeout + std::chrono::seconds(1));
  } catch (const std::exception&) {
  }
  if (!value)
    throw CommError("fsdpp comm: rank 0 never answered: it did not publish its store's address in " +
                    agent_store_where(given) + " within " + ms_text(timeout) + " (rank 0 is not running or failed " +
                    "before it hosted the store); rank " + std::to_string(given.rank) + " gave up");
  WorldSpec world = given;
  auto space = value->find(' ');
  try {
    if (space == std::string::npos) throw std::invalid_argument("no port");
    world.master_addr = value->substr(0, space);
    world.master_port = std::stoi(value->substr(space + 1));
  } catch (const std::exception&) {
    throw CommError("fsdpp comm: " + agent_store_where(given) + " holds '" + *value + "' under " + key +
                    ", not \"host port\"");
  }
  return world;
}

}  // namespace

bool is_loopback_address(const std::string& address) { return address == "localhost" || address.rfind("127.", 0) == 0; }

JoinedWorld join_world(const WorldSpec& given, std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const std::string me = "rank " + std::to_string(given.rank);
  // Under torchrun's agent store, fsdpp's store is rank 0's own, where it publishes it.
  WorldSpec world = given;
  c10::intrusive_ptr<c10d::TCPStore> agent;
  if (given.agent_store) {
    agent = join_agent_store(given, timeout);
    if (given.rank == 0) {
      world.master_addr = own_store_host(given);
      world.master_port = 0;  // the system picks a free port
    } else {
      world = read_published_store(agent, given, timeout);
    }
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(world.master_port);
  options.isServer = world.rank == 0;
  options.numWorkers = world.world_size;
  options.waitWorkers = false;  // the board's records say who arrived, and who did not
  options.timeout = timeout;
  JoinedWorld joined;
  if (world.rank == 0) {
    if (is_loopback_address(world.master_addr)) options.masterListenFd = loopback_listen_fd(world.master_port);
    try {
      joined.store = c10::make_intrusive<c10d::TCPStore>(world.master_addr, options);
    } catch (const std::exception& e) {
      throw CommError("fsdpp comm: rank 0 could not host the TCPStore at " + world.master_addr + ":" +
                      std::to_string(world.master_port) + ": " + first_line_of(e.what()));
    }
    if (agent) {
      world.master_port = static_cast<int>(joined.store->getPort());
      publish_store(agent, world, timeout);
    }
  }
  const std::string where = world.master_addr + ":" + std::to_string(world.master_port);
  if (world.rank != 0) {
    std::string error;
    auto store = join_as_client(world.master_addr, options, timeout, error);
    if (!store)
      throw CommError("fsdpp comm: rank 0 never answered: no TCPStore at " + where + " within " + ms_text(timeout) +
                      " (rank 0 is not running, failed before it hosted the store, or cannot be reached from here); " +
                      me + " gave up" + error);
    joined.store = store;
  }
  auto board_timeout = std::clamp(timeout, std::chrono::milliseconds(500), std::chrono::milliseconds(3000));
  joined.board = FailureBoard::join(world, board_timeout);
  if (!joined.board)
    throw CommError("fsdpp comm: rank 0 is gone or cut off: the TCPStore it hosts at " + where +
                    " stopped answering while " + me + " joined it");
  // Rank 0 counts from its own start; a rank that joined a late rank 0 still gets a moment.
  auto deadline = std::max(start + timeout, Clock::now() + std::chrono::seconds(1));
  auto missing = joined.board->await_members(deadline);
  if (missing && missing->empty()) return joined;
  // Who failed: a post (the rank 0 that gave up on an absent rank posts about it), a
  // member whose process is gone, the store gone, or the ranks that never arrived.
  std::string cause;
  if (auto known = joined.board->known_failure()) {
    cause = *known;
  } else if (!missing || !joined.board->store_reachable()) {
    cause = joined.board->explain();
  } else {
    std::string why = "did not join the world at " + where + " within " + ms_text(timeout) +
                      " (not started, failed before connecting, or cannot reach the master)";
    joined.board->post_absent(*missing, why);
    cause = ranks_phrase(*missing) + " " + why;
  }
  joined.board->leave(std::min(timeout, kFailureLinger));
  throw CommError("fsdpp comm: " + cause + "; here " + me + " of " + std::to_string(world.world_size) +
                  " stopped waiting for the world to meet after " + since(start));
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> connect_group(
    const std::function<c10::intrusive_ptr<c10d::ProcessGroupGloo>()>& make_group, FailureBoard& board,
    const std::string& group_name, const std::vector<int>& world_ranks, int group_rank,
    std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const std::string here = "connecting group '" + group_name + "' (rank " + std::to_string(group_rank) + " of " +
                           std::to_string(world_ranks.size()) + ")";
  board.mark_connect(group_name, /*finished=*/false);
  auto group = start_detached<c10::intrusive_ptr<c10d::ProcessGroupGloo>>(make_group);
  // Also name the peers that never began connecting this group (they are where the cause
  // lies), else those that had not finished.
  auto cause = [&] {
    std::string text = board.explain();
    std::vector<int> others = world_ranks;
    others.erase(others.begin() + group_rank);
    if (auto absent = board.without_connect_mark(group_name, false, others); absent && !absent->empty())
      text += "; " + ranks_phrase(*absent) + " never began connecting it";
    else if (auto behind = board.without_connect_mark(group_name, true, others); behind && !behind->empty())
      text += "; " + ranks_phrase(*behind) + " had not finished connecting it";
    return text;
  };
  // Every failure signs out first, as Communicator::fail() does: the store's host then
  // stays up a moment, so that the others read the board.
  auto failure = [&](const std::string& message) {
    board.leave(std::min(timeout, kFailureLinger));
    return CommError("fsdpp comm: " + message);
  };
  const auto deadline = start + timeout;
  for (;;) {
    auto wait = std::min<Clock::duration>(kConnectPoll, std::max<Clock::duration>(deadline - Clock::now(), {}));
    if (group.wait_for(wait) == std::future_status::ready) {
      try {
        auto connected = group.get();
        board.mark_connect(group_name, /*finished=*/true);
        return connected;
      } catch (const std::exception& e) {
        throw failure(cause() + "; here " + here + " failed after " + since(start) + ": " + first_line_of(e.what()));
      }
    }
    if (auto known = board.known_failure())
      throw failure(*known + "; here " + here + " stopped waiting after " + since(start));
    if (!board.store_reachable()) throw failure(board.explain() + "; here " + here + " failed");
    if (Clock::now() >= deadline) throw failure(cause() + "; here " + here + " timed out after " + since(start));
  }
}

GlooListen gloo_listen_for(const WorldSpec& world) {
  GlooListen listen;
  if (const char* iface = std::getenv("GLOO_SOCKET_IFNAME"); iface != nullptr && *iface != '\0')
    listen.interface = iface;
  else if (is_loopback_address(world.master_addr))
    listen.address = "127.0.0.1";
  else
    listen.address = local_address_towards(world.master_addr, world.master_port);
  return listen;
}

}  // namespace fsdpp::comm
