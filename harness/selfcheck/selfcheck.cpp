#include "harness/selfcheck/selfcheck.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>

#include "harness/oracle/collective_reference.h"
#include "harness/oracle/tolerance.h"

namespace fsdpp::harness {

using comm::CollectiveKind;
using comm::Communicator;
using comm::ReduceOp;

bool SelfcheckResult::all_correct() const {
  return !rows.empty() && std::all_of(rows.begin(), rows.end(), [](const auto& r) { return r.correct; });
}

namespace {

struct Case {
  std::string op;
  at::ScalarType dtype;
  CollectiveKind kind;
  int64_t numel;      // nccl-tests size in elements
  double bus_factor;  // busbw = algbw * bus_factor
  // Allocates the inputs once and returns the op bound to them; the op returns the
  // result to check (undefined: nothing to check). Timed repetitions reuse the buffers.
  std::function<std::function<at::Tensor()>()> setup;
  std::function<at::Tensor()> expected;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<Case> make_cases(Communicator& comm, const SelfcheckOptions& o) {
  const int n = comm.size(), me = comm.rank();
  const int64_t k = o.numel;
  std::vector<Case> cases;
  const std::vector<at::ScalarType> dtypes = {at::kFloat, at::kBFloat16, at::kHalf, at::kLong};
  for (auto dt : dtypes) {
    uint64_t seed = o.seed + static_cast<uint64_t>(dt);
    cases.push_back({"all_gather", dt, CollectiveKind::AllGather, k * n, (n - 1.0) / n,
                     [&comm, k, n, dt, seed, me] {
                       auto in = rank_input(me, k, dt, seed);
                       auto out = at::empty({k * n}, dt);
                       return std::function<at::Tensor()>([&comm, in, out] {
                         comm.all_gather_into(out, in);
                         return out;
                       });
                     },
                     [k, n, dt, seed] { return reference_all_gather(all_rank_inputs(n, k, dt, seed)); }});
    std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Max};
    if (at::isFloatingType(dt)) ops.insert(ops.begin() + 1, ReduceOp::Avg);
    for (auto op : ops) {
      std::string tag = std::string("[") + comm::to_string(op) + "]";
      if (op != ReduceOp::Max)
        cases.push_back({"reduce_scatter" + tag, dt, CollectiveKind::ReduceScatter, k * n, (n - 1.0) / n,
                         [&comm, k, n, dt, seed, me, op] {
                           auto in = rank_input(me, k * n, dt, seed);
                           auto out = at::empty({k}, dt);
                           return std::function<at::Tensor()>([&comm, in, out, op] {
                             comm.reduce_scatter(out, in, op);
                             return out;
                           });
                         },
                         [k, n, dt, seed, me, op] {
                           return reference_reduce(all_rank_inputs(n, k * n, dt, seed), op).narrow(0, me * k, k);
                         }});
      cases.push_back({"all_reduce" + tag, dt, CollectiveKind::AllReduce, k, 2.0 * (n - 1.0) / n,
                       [&comm, k, dt, seed, me, op] {
                         auto t = rank_input(me, k, dt, seed);
                         return std::function<at::Tensor()>([&comm, t, op] {
                           comm.all_reduce(t, op);
                           return t;
                         });
                       },
                       [k, n, dt, seed, op] { return reference_reduce(all_rank_inputs(n, k, dt, seed), op); }});
    }
    int root = n - 1;
    cases.push_back({"broadcast", dt, CollectiveKind::Broadcast, k, 1.0,
                     [&comm, k, dt, seed, me, root] {
                       auto t = rank_input(me, k, dt, seed);
                       return std::function<at::Tensor()>([&comm, t, root] {
                         comm.broadcast(t, root);
                         return t;
                       });
                     },
                     [k, dt, seed, root] { return rank_input(root, k, dt, seed); }});
    int64_t c = k / n + 1;
    cases.push_back({"all_to_all", dt, CollectiveKind::AllToAll, c * n, (n - 1.0) / n,
                     [&comm, c, n, dt, seed, me] {
                       auto in = rank_input(me, c * n, dt, seed);
                       auto out = at::empty({c * n}, dt);
                       return std::function<at::Tensor()>([&comm, in, out] {
                         comm.all_to_all_single(out, in);
                         return out;
                       });
                     },
                     [c, n, dt, seed, me] {
                       std::vector<std::vector<int64_t>> splits(n, std::vector<int64_t>(n, c));
                       return reference_all_to_all(all_rank_inputs(n, c * n, dt, seed), splits, me);
                     }});
  }
  cases.push_back({"barrier", at::kByte, CollectiveKind::Barrier, 0, 0,
                   [&comm] {
                     return std::function<at::Tensor()>([&comm] {
                       comm.barrier();
                       return at::Tensor();
                     });
                   },
                   [] { return at::Tensor(); }});
  return cases;
}

}  // namespace

SelfcheckResult run_selfcheck(Communicator& comm, const SelfcheckOptions& options) {
  SelfcheckResult result;
  result.world_size = comm.size();
  for (auto& c : make_cases(comm, options)) {
    SelfcheckRow row;
    row.op = c.op;
    row.dtype = c.kind == CollectiveKind::Barrier ? "-" : c10::toString(c.dtype);
    row.numel = c.numel;
    row.bytes = c.numel * (c.kind == CollectiveKind::Barrier ? 0 : c10::elementSize(c.dtype));

    auto run = c.setup();
    auto before = comm.stats().get(c.kind).bytes_sent;
    at::Tensor got = run();
    row.bytes_sent = comm.stats().get(c.kind).bytes_sent - before;
    // [mismatching elements, max abs error]: reduced with MAX so every rank agrees.
    auto verdict = at::zeros({2}, at::kDouble);
    if (got.defined()) {
      auto cmp = compare(got, c.expected());
      verdict[0] = cmp.ok ? 0.0 : 1.0;
      verdict[1] = cmp.max_abs_error;
    }
    std::vector<double> times;
    for (int i = 0; i < options.iterations; ++i) {
      comm.barrier();
      auto t0 = std::chrono::steady_clock::now();
      run();
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    auto timing = at::tensor({median(times)}, at::kDouble);
    comm.all_reduce(verdict, ReduceOp::Max);
    comm.all_reduce(timing, ReduceOp::Max);
    row.correct = verdict[0].item<double>() == 0.0;
    row.max_abs_error = verdict[1].item<double>();
    row.time_ms = timing[0].item<double>();
    if (row.time_ms > 0) row.busbw_gbs = row.bytes / (row.time_ms * 1e6) * c.bus_factor;
    result.rows.push_back(row);
  }
  return result;
}

std::string format_table(const SelfcheckResult& result) {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof(line), "%-20s %-9s %10s %9s %12s %-7s %10s %9s %10s\n", "op", "dtype", "elements", "MiB",
                "sent/rank", "correct", "max_err", "time_ms", "busbw_GB/s");
  os << line;
  for (const auto& r : result.rows) {
    std::snprintf(line, sizeof(line), "%-20s %-9s %10lld %9.2f %12lld %-7s %10.3g %9.3f %10.3f\n", r.op.c_str(),
                  r.dtype.c_str(), static_cast<long long>(r.numel), r.bytes / 1048576.0,
                  static_cast<long long>(r.bytes_sent), r.correct ? "yes" : "NO", r.max_abs_error, r.time_ms,
                  r.busbw_gbs);
    os << line;
  }
  int bad = 0;
  for (const auto& r : result.rows) bad += !r.correct;
  os << (bad == 0 ? "selfcheck: all " + std::to_string(result.rows.size()) + " collectives correct on " +
                        std::to_string(result.world_size) + " ranks"
                  : "selfcheck: " + std::to_string(bad) + " collectives WRONG on " + std::to_string(result.world_size) +
                        " ranks")
     << "\n";
  return os.str();
}

nlohmann::json to_json(const SelfcheckResult& result) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : result.rows)
    rows.push_back({{"op", r.op},
                    {"dtype", r.dtype},
                    {"numel", r.numel},
                    {"bytes", r.bytes},
                    {"bytes_sent_per_rank", r.bytes_sent},
                    {"correct", r.correct},
                    {"max_abs_error", r.max_abs_error},
                    {"time_ms", r.time_ms},
                    {"busbw_gbs", r.busbw_gbs}});
  return {{"format", "fsdpp.selfcheck"},
          {"version", 1},
          {"world_size", result.world_size},
          {"all_correct", result.all_correct()},
          {"rows", rows}};
}

}  // namespace fsdpp::harness
