#include "core/comm/comm_stats.h"

namespace fsdpp::comm {

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::AllToAll: return "all_to_all";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "?";
}

KindStats& KindStats::operator+=(const KindStats& other) {
  calls += other.calls;
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  busy_ms += other.busy_ms;
  blocked_ms += other.blocked_ms;
  return *this;
}

void CommStats::add_transfer(CollectiveKind kind, int64_t sent, int64_t received) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = by_kind_[static_cast<int>(kind)];
  s.bytes_sent += sent;
  s.bytes_received += received;
}

void CommStats::add_call(CollectiveKind kind, double busy_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = by_kind_[static_cast<int>(kind)];
  s.calls += 1;
  s.busy_ms += busy_ms;
}

void CommStats::add_blocked(CollectiveKind kind, double blocked_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  by_kind_[static_cast<int>(kind)].blocked_ms += blocked_ms;
}

KindStats CommStats::get(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_kind_[static_cast<int>(kind)];
}

KindStats CommStats::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  KindStats t;
  for (const auto& s : by_kind_) t += s;
  return t;
}

void CommStats::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  by_kind_ = {};
}

}  // namespace fsdpp::comm
