// Network exposure: a world whose master address is loopback listens on loopback only
// (the TCPStore on rank 0 and every rank's Gloo listener); another master address makes
// them listen where peers on other machines can reach them.
#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "harness/testing/multirank.h"

namespace fsdpp::comm {
namespace {

// A listening TCP socket: its local address as /proc/net/tcp{,6} prints it.
struct Listener {
  bool ipv6 = false;
  std::string address_hex;  // IPv4: 8 hex digits, little-endian; IPv6: 32
  int port = 0;

  bool loopback() const {
    if (!ipv6) return address_hex.substr(6, 2) == "7F";  // 127.x.x.x
    // ::1, or an IPv4-mapped 127.x.x.x (::ffff:7f..)
    return address_hex == "00000000000000000000000001000000" ||
           (address_hex.substr(0, 24) == "0000000000000000FFFF0000" && address_hex.substr(30, 2) == "7F");
  }
  std::string describe() const {
    return std::string(ipv6 ? "tcp6 " : "tcp ") + address_hex + ":" + std::to_string(port);
  }
};

// The listening sockets this process holds: /proc/net/tcp{,6} rows in state 0A (LISTEN)
// whose inode is one of this process's socket descriptors.
std::vector<Listener> listeners_of_this_process() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<Listener> found;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;
      auto colon = local.find(':');
      found.push_back(
          {std::string(table).back() == '6', local.substr(0, colon), std::stoi(local.substr(colon + 1), nullptr, 16)});
    }
  }
  return found;
}

TEST(NetworkExposure, ALoopbackWorldListensOnLoopbackOnly) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto listeners = listeners_of_this_process();
    // Rank 0: the TCPStore and its Gloo listener; rank 1: its Gloo listener.
    EXPECT_GE(listeners.size(), ctx.rank == 0 ? 2u : 1u);
    for (const auto& l : listeners) EXPECT_TRUE(l.loopback()) << "rank " << ctx.rank << " listens on " << l.describe();
    auto t = at::ones({8});
    ctx.comm.all_reduce(t, ReduceOp::Sum);  // the world works
    EXPECT_EQ(t[0].item<float>(), 2.0f);
  });
}

// This machine's first IPv4 address that is up and not loopback, or "".
std::string non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string found;
  for (auto* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
    found = text;
  }
  ::freeifaddrs(list);
  return found;
}

TEST(NetworkExposure, AnotherMasterAddressListensWherePeersCanReach) {
  const std::string address = non_loopback_ipv4();
  if (address.empty()) GTEST_SKIP() << "this machine has no IPv4 address other than loopback";
  harness::RunOptions options;
  options.master_addr = address;
  harness::expect_ranks_pass(
      2,
      [](harness::RankContext& ctx) {
        auto listeners = listeners_of_this_process();
        bool reachable = false;
        for (const auto& l : listeners) reachable = reachable || !l.loopback();
        EXPECT_TRUE(reachable) << "rank " << ctx.rank << " listens on loopback only";
        auto t = at::ones({8});
        ctx.comm.all_reduce(t, ReduceOp::Sum);
        EXPECT_EQ(t[0].item<float>(), 2.0f);
      },
      options);
}

}  // namespace
}  // namespace fsdpp::comm
