// How the ranks of a world meet and connect, bounded in time, naming whoever is missing.
//
// 1. Rank 0 hosts the world's TCPStore; the others join it. A rank that cannot join
//    within the timeout says that rank 0 never answered. Under torchrun, whose agent
//    already hosts a store at MASTER_ADDR:MASTER_PORT (WorldSpec::agent_store), rank 0
//    hosts fsdpp's on a free port and publishes "host port" in the agent's store under
//    fsdpp/attempt_<TORCHELASTIC_RESTART_COUNT>/store; the others read it there.
// 2. Every rank joins the failure board (failure_board.h) and waits, up to the timeout,
//    for every other rank's record. A rank that never arrives is named, and posted on the
//    board so that the ranks that ask later read the same.
// 3. Each Gloo group connects its full mesh on a detached thread while this thread reads
//    the board every second: a peer that failed or died meanwhile ends the wait at once,
//    by name; otherwise the connect gives up after the timeout and names the ranks that
//    have not finished connecting.
// So connecting a world takes at most about twice the collective timeout (1-2, then 3),
// and every failure is one CommError line. Without these bounds a rank killed while the
// others connect left them in Gloo's connectFullMesh for about five timeouts, and joining a
// store whose host was gone took three, with a c10d warning and stack trace per retry.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/failure_board.h"
#include "core/comm/rendezvous.h"

namespace c10d {
class TCPStore;
class ProcessGroupGloo;
}  // namespace c10d

namespace fsdpp::comm {

struct JoinedWorld {
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::shared_ptr<FailureBoard> board;  // never null for a world of two or more
};

// Steps 1 and 2 for this rank of `given` (world_size >= 2). Throws CommError.
JoinedWorld join_world(const WorldSpec& given, std::chrono::milliseconds timeout);

// Step 3: runs `make_group` (which constructs the ProcessGroupGloo of group `group_name`,
// whose members are `world_ranks`, this rank being world_ranks[group_rank]) under the
// timeout, reading `board` meanwhile, and records on the board that this rank connected.
// Throws CommError naming the group, this rank and the cause.
c10::intrusive_ptr<c10d::ProcessGroupGloo> connect_group(
    const std::function<c10::intrusive_ptr<c10d::ProcessGroupGloo>()>& make_group, FailureBoard& board,
    const std::string& group_name, const std::vector<int>& world_ranks, int group_rank,
    std::chrono::milliseconds timeout);

// Where Gloo should listen: GLOO_SOCKET_IFNAME's interface, loopback for a loopback
// master, else this machine's address on the route to the master ("" when none is found:
// Gloo's default device then).
struct GlooListen {
  std::string interface;  // from GLOO_SOCKET_IFNAME
  std::string address;
};
GlooListen gloo_listen_for(const WorldSpec& world);

bool is_loopback_address(const std::string& address);

}  // namespace fsdpp::comm
