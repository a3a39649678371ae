// Per-rank accounting of every collective a Communicator runs: how many calls, how many
// bytes this rank put on the wire and took off it, and how long it took. Bytes are
// counted from the transfer plan actually handed to the transport (split sizes times
// element size, excluding the rank's copy to itself), so tests can hold them against
// the textbook volumes.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace fsdpp::comm {

enum class CollectiveKind { AllGather, ReduceScatter, AllReduce, Broadcast, AllToAll, Barrier };
inline constexpr int kNumCollectiveKinds = 6;
const char* to_string(CollectiveKind kind);

struct KindStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  double busy_ms = 0;     // issue -> completion, measured on the communication thread
  double blocked_ms = 0;  // time callers spent inside wait(): the exposed part

  KindStats& operator+=(const KindStats& other);
};

// Thread-safe: written by the communication thread, read by anyone.
class CommStats {
 public:
  void add_transfer(CollectiveKind kind, int64_t sent, int64_t received);
  void add_call(CollectiveKind kind, double busy_ms);
  void add_blocked(CollectiveKind kind, double blocked_ms);

  KindStats get(CollectiveKind kind) const;
  KindStats total() const;
  void reset();

 private:
  mutable std::mutex mu_;
  std::array<KindStats, kNumCollectiveKinds> by_kind_{};
};

}  // namespace fsdpp::comm
