// A failing rank never hangs the group: the launcher names it and stops the others, and
// even without the launcher the survivors error out within the collective timeout.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/testing/multirank.h"

namespace fsdpp {
namespace {

using harness::LaunchReport;
using harness::RankContext;
using harness::RankStatus;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

harness::RunOptions options_with(std::chrono::seconds budget, std::chrono::seconds comm_timeout, bool kill_all = true) {
  harness::RunOptions o;
  o.launch.budget = budget;
  o.launch.kill_all_on_failure = kill_all;
  o.comm_timeout = comm_timeout;
  return o;
}

void all_reduce_ones(RankContext& ctx) {
  auto t = at::ones({1000});
  ctx.comm.all_reduce(t, comm::ReduceOp::Sum);
}

TEST(RankFailures, ARankThatThrowsMidCollectiveIsNamedAndTheOthersAreStopped) {
  auto report = harness::run_ranks(
      3,
      [](RankContext& ctx) {
        all_reduce_ones(ctx);  // everyone is connected and working
        if (ctx.rank == 1) throw std::runtime_error("injected failure on rank 1");
        all_reduce_ones(ctx);  // ranks 0 and 2 block here, waiting for rank 1
      },
      options_with(std::chrono::seconds(60), std::chrono::seconds(60)));
  EXPECT_FALSE(report.ok());
  EXPECT_THAT(report.failed_ranks(), ElementsAre(1));
  EXPECT_EQ(report.ranks[1].status, RankStatus::Failed);
  EXPECT_THAT(report.ranks[1].message, HasSubstr("injected failure on rank 1"));
  // The survivors were either stopped by the launcher or saw the connection drop first.
  for (int r : {0, 2}) {
    EXPECT_NE(report.ranks[r].status, RankStatus::Succeeded);
    if (report.ranks[r].status == RankStatus::Failed) {
      EXPECT_TRUE(report.ranks[r].comm_failure);
    }
  }
  EXPECT_LT(report.wall_s, 30.0) << "the launcher must not wait for the collective timeout";
  EXPECT_THAT(report.summary(), HasSubstr("rank 1 failed"));
}

TEST(RankFailures, WithoutTheLauncherSurvivorsFailOnTheirOwnNamingTheOp) {
  auto report = harness::run_ranks(
      3,
      [](RankContext& ctx) {
        all_reduce_ones(ctx);
        if (ctx.rank == 1) throw std::runtime_error("injected failure on rank 1");
        all_reduce_ones(ctx);
      },
      options_with(std::chrono::seconds(60), std::chrono::seconds(5), /*kill_all=*/false));
  EXPECT_FALSE(report.ok());
  EXPECT_THAT(report.failed_ranks(), ElementsAre(1));
  for (int r : {0, 2}) {
    EXPECT_EQ(report.ranks[r].status, RankStatus::Failed) << "rank " << r;
    EXPECT_TRUE(report.ranks[r].comm_failure) << "rank " << r;
    EXPECT_THAT(report.ranks[r].message, HasSubstr("all_reduce[sum](1000 x Float)"));
    EXPECT_THAT(report.ranks[r].message, HasSubstr("on group 'world' (rank " + std::to_string(r) + " of 3)"));
  }
  EXPECT_LT(report.wall_s, 40.0);
}

// The survivors' one line names the rank that failed: from its post on the failure board
// (communicator.h), or, for a rank that died without a word, from its pid being gone.
// Checked for a failing rank that hosts the TCPStore (it lingers so the others can read
// its post) and one that does not, and for a rank killed by SIGKILL.
struct Culprit {
  int rank;
  bool killed;  // SIGKILL instead of throwing
};

class SurvivorsNameTheCulprit : public ::testing::TestWithParam<Culprit> {};

TEST_P(SurvivorsNameTheCulprit, InTheirOneLine) {
  const Culprit culprit = GetParam();
  auto report = harness::run_ranks(
      3,
      [culprit](RankContext& ctx) {
        all_reduce_ones(ctx);
        if (ctx.rank == culprit.rank) {
          if (culprit.killed) std::raise(SIGKILL);
          throw std::runtime_error("injected failure on rank " + std::to_string(ctx.rank));
        }
        all_reduce_ones(ctx);  // the others block here
      },
      options_with(std::chrono::seconds(60), std::chrono::seconds(30), /*kill_all=*/false));
  const std::string who = "rank " + std::to_string(culprit.rank);
  EXPECT_THAT(report.failed_ranks(), ElementsAre(culprit.rank)) << report.summary();
  for (const auto& r : report.ranks) {
    if (r.rank == culprit.rank) continue;
    EXPECT_EQ(r.status, RankStatus::Failed) << report.summary();
    EXPECT_TRUE(r.comm_failure) << r.message;
    // Well inside the 30 s collective timeout: the board told them.
    EXPECT_LT(r.ended_after_s, 15.0) << r.message;
    if (!culprit.killed)
      EXPECT_THAT(r.message, HasSubstr(who + " failed: injected failure on " + who));
    else if (culprit.rank == 0)
      EXPECT_THAT(r.message, HasSubstr("rank 0 is gone or cut off: the TCPStore it hosts"));
    else
      EXPECT_THAT(r.message, ::testing::ContainsRegex(who + " \\(pid [0-9]+ on .*\\) is gone"));
    EXPECT_THAT(r.message,
                HasSubstr("all_reduce[sum](1000 x Float) on group 'world' (rank " + std::to_string(r.rank) + " of 3)"));
    EXPECT_EQ(r.message.find('\n'), std::string::npos) << "one line: " << r.message;
  }
}

INSTANTIATE_TEST_SUITE_P(Culprits, SurvivorsNameTheCulprit,
                         ::testing::Values(Culprit{0, false}, Culprit{1, false}, Culprit{0, true}, Culprit{2, true}),
                         [](const auto& info) {
                           return std::string(info.param.killed ? "Killed" : "Throwing") + "Rank" +
                                  std::to_string(info.param.rank);
                         });

TEST(RankFailures, ARankThatFailsOutsideACollectiveIsNamedByPeersWaitingForIt) {
  // Rank 0 (the store's host) fails while the others already wait in a collective for
  // it: they read its post within a second, long before the collective timeout.
  auto report = harness::run_ranks(
      2,
      [](RankContext& ctx) {
        all_reduce_ones(ctx);
        if (ctx.rank == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          throw std::runtime_error("cannot create run directory /nowhere");
        }
        all_reduce_ones(ctx);
      },
      options_with(std::chrono::seconds(90), std::chrono::seconds(60), /*kill_all=*/false));
  EXPECT_EQ(report.ranks[1].status, RankStatus::Failed) << report.summary();
  EXPECT_THAT(report.ranks[1].message, HasSubstr("rank 0 failed: cannot create run directory /nowhere"));
  EXPECT_LT(report.ranks[1].ended_after_s, 20.0) << report.summary();
}

TEST(RankFailures, AThrowingRankWithLiveSubgroupsExitsWithoutWaitingForPeers) {
  // Subgroups destroyed while the exception unwinds must not wait at the teardown
  // handshake for peers that are stuck in a collective (that would take the timeout).
  auto report = harness::run_ranks(
      3,
      [](RankContext& ctx) {
        auto sub = ctx.comm.subgroup({0, 1, 2}, "live");
        auto t = at::ones({10});
        sub->all_reduce(t, comm::ReduceOp::Sum);
        if (ctx.rank == 1) throw std::runtime_error("injected failure on rank 1");
        sub->all_reduce(t, comm::ReduceOp::Sum);
      },
      options_with(std::chrono::seconds(120), std::chrono::seconds(60), /*kill_all=*/false));
  EXPECT_THAT(report.failed_ranks(), ElementsAre(1));
  EXPECT_LT(report.ranks[1].ended_after_s, 20.0);
  EXPECT_LT(report.wall_s, 40.0) << report.summary();
}

TEST(RankFailures, ARankThatExitsEarlyIsReportedAsSuch) {
  auto report = harness::run_ranks(
      3,
      [](RankContext& ctx) {
        if (ctx.rank == 2) ::_exit(0);  // leaves without a word
        all_reduce_ones(ctx);
      },
      options_with(std::chrono::seconds(60), std::chrono::seconds(60)));
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.ranks[2].status, RankStatus::ExitedEarly);
  EXPECT_THAT(report.failed_ranks(), ::testing::Contains(2));
  EXPECT_THAT(report.summary(), HasSubstr("rank 2 exited early"));
  EXPECT_LT(report.wall_s, 30.0);
}

TEST(RankFailures, AHungRankIsKilledWhenTheBudgetRunsOut) {
  auto report = harness::run_ranks(
      2,
      [](RankContext& ctx) {
        if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::minutes(5));
        all_reduce_ones(ctx);
      },
      options_with(std::chrono::seconds(4), std::chrono::seconds(600)));
  EXPECT_TRUE(report.budget_exhausted);
  EXPECT_EQ(report.ranks[0].status, RankStatus::TimedOut);
  EXPECT_EQ(report.ranks[1].status, RankStatus::TimedOut);
  EXPECT_THAT(report.summary(), HasSubstr("had not finished"));
  EXPECT_LT(report.wall_s, 15.0);
}

TEST(RankFailures, ACrashIsReportedWithItsSignal) {
  auto report = harness::run_ranks(
      2,
      [](RankContext& ctx) {
        if (ctx.rank == 0) std::raise(SIGABRT);
        all_reduce_ones(ctx);
      },
      options_with(std::chrono::seconds(60), std::chrono::seconds(60)));
  EXPECT_EQ(report.ranks[0].status, RankStatus::Crashed);
  EXPECT_EQ(report.ranks[0].signal, SIGABRT);
  EXPECT_THAT(report.failed_ranks(), ElementsAre(0)) << report.summary();
}

TEST(RankFailures, AFailedAssertionOnOneRankFailsTheRunWithItsOutput) {
  auto report =
      harness::run_ranks_with_gtest(3, [](RankContext& ctx) { EXPECT_NE(ctx.rank, 2) << "marker-from-rank-two"; });
  EXPECT_FALSE(report.ok());
  EXPECT_THAT(report.failed_ranks(), ElementsAre(2));
  EXPECT_THAT(report.summary(), HasSubstr("marker-from-rank-two"));
}

TEST(RankFailures, AfterATimeoutTheGroupRefusesFurtherWork) {
  harness::expect_ranks_pass(
      2,
      [](RankContext& ctx) {
        const auto done = ctx.shared_dir / "rank0-failed";
        if (ctx.rank == 1) {  // stays alive, never joining, until rank 0 has timed out: no early exit to see
          harness::wait_for_file(done, std::chrono::seconds(60));
          return;
        }
        auto t0 = std::chrono::steady_clock::now();
        try {
          all_reduce_ones(ctx);
          ADD_FAILURE() << "all_reduce without a peer must fail";
        } catch (const comm::CommError& e) {
          EXPECT_THAT(e.what(), HasSubstr("all_reduce[sum]"));
          EXPECT_THAT(e.what(), HasSubstr("on group 'world' (rank 0 of 2)"));
        }
        double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::ofstream(done) << "timed out\n";
        EXPECT_GE(waited, 1.5);  // the 2 s timeout, not an early error (a timeout cannot fire early)
        EXPECT_TRUE(ctx.comm.broken());
        try {
          ctx.comm.barrier();
          ADD_FAILURE() << "a broken group must refuse work";
        } catch (const comm::CommError& e) {
          EXPECT_THAT(e.what(), HasSubstr("broken"));
        }
      },
      options_with(std::chrono::seconds(60), std::chrono::seconds(2), /*kill_all=*/false));
}

// abort() (a process about to exit after a failure) shuts the group: work issued after it
// fails at once, saying it came after shutdown, instead of queueing behind a collective that
// is stuck on a peer that never joins (the communication thread is inside that one, or
// refuses it if it had not taken it up yet).
TEST(RankFailures, AfterAbortNewWorkFailsAtOnceWithoutQueueingBehindAStuckCollective) {
  harness::expect_ranks_pass(
      2,
      [](RankContext& ctx) {
        const auto done = ctx.shared_dir / "rank0-aborted";
        if (ctx.rank == 1) {  // never joins rank 0's all_reduce; stays until rank 0 is done
          harness::wait_for_file(done, std::chrono::seconds(60));
          return;
        }
        auto stuck = ctx.comm.all_reduce_async(at::ones({4}), comm::ReduceOp::Sum);
        ctx.comm.abort("the test gives up");
        auto after = ctx.comm.all_reduce_async(at::ones({4}), comm::ReduceOp::Sum);
        EXPECT_TRUE(after.completed()) << "queued behind the stuck all_reduce";
        try {
          after.wait();
          ADD_FAILURE() << "work after abort() must fail";
        } catch (const std::exception& e) {
          EXPECT_THAT(e.what(), HasSubstr("issued after shutdown()"));
        }
        // Either abandoned inside the communication thread (it had started), or, when abort()
        // came before the thread took it up (a loaded machine), refused there as broken.
        if (stuck.completed()) {
          try {
            stuck.wait();
            ADD_FAILURE() << "the stuck all_reduce completed without its peer";
          } catch (const std::exception& e) {
            EXPECT_THAT(e.what(), HasSubstr("refused: the group is broken by an earlier failure"));
          }
        }
        std::ofstream(done) << "aborted\n";
      },
      options_with(std::chrono::seconds(90), std::chrono::seconds(30), /*kill_all=*/false));
}

// The connect phase (core/comm/connect.h): a rank that never arrives, or dies while the
// others connect, is named by them within about twice the collective timeout. Before,
// a rank killed while the others connected left them in Gloo's connectFullMesh for five
// timeouts, and a missing rank 0 for three, without a name (the fault trials found it).
constexpr auto kConnectTimeout = std::chrono::seconds(3);

harness::RunOptions connect_trial(std::function<void(int rank)> before_connect) {
  auto o = options_with(std::chrono::seconds(90), kConnectTimeout, /*kill_all=*/false);
  o.before_connect = std::move(before_connect);
  return o;
}

// Every rank but `culprit` failed in its communicator with one line matching `names`,
// within two timeouts (meeting, then the Gloo mesh), rank 0's 3 s linger, and slack for a
// loaded machine.
void expect_the_others_name(const LaunchReport& report, int culprit, const std::string& names) {
  for (const auto& r : report.ranks) {
    if (r.rank == culprit) continue;
    EXPECT_EQ(r.status, RankStatus::Failed) << report.summary();
    EXPECT_TRUE(r.comm_failure) << r.message;
    EXPECT_THAT(r.message, ::testing::ContainsRegex(names)) << "rank " << r.rank;
    EXPECT_LT(r.ended_after_s, 2 * kConnectTimeout.count() + 3 + 5.0) << r.message;
    EXPECT_EQ(r.message.find('\n'), std::string::npos) << "one line: " << r.message;
  }
}

TEST(ConnectFailures, ARankThatNeverArrivesIsNamedByTheOthers) {
  auto report = harness::run_ranks(3, all_reduce_ones, connect_trial([](int rank) {
                                     if (rank == 2) std::raise(SIGKILL);
                                   }));
  EXPECT_EQ(report.ranks[2].status, RankStatus::Crashed) << report.summary();
  expect_the_others_name(report, 2, "rank 2 did not join the world at 127\\.0\\.0\\.1:[0-9]+ within 3000 ms");
}

TEST(ConnectFailures, WithoutRankZeroTheOthersSayItNeverAnswered) {
  auto report = harness::run_ranks(3, all_reduce_ones, connect_trial([](int rank) {
                                     if (rank == 0) std::raise(SIGKILL);
                                   }));
  expect_the_others_name(report, 0, "rank 0 never answered: no TCPStore at 127\\.0\\.0\\.1:[0-9]+ within 3000 ms");
}

// A store as torchrun's agent hosts it (MASTER_ADDR:MASTER_PORT, here a free port).
c10::intrusive_ptr<c10d::TCPStore> torchrun_agent_store() {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

// Under torchrun the agent hosts the store at MASTER_ADDR:MASTER_PORT and rank 0 publishes
// where it hosts fsdpp's: without rank 0 the others say it never published, in time.
TEST(ConnectFailures, UnderTorchrunsAgentStoreWithoutRankZeroTheOthersSayItNeverPublished) {
  auto agent = torchrun_agent_store();
  comm::WorldSpec world;
  world.rank = 1;
  world.world_size = 2;
  world.master_port = static_cast<int>(agent->getPort());
  world.agent_store = true;
  comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  const auto start = std::chrono::steady_clock::now();
  try {
    comm::Communicator::connect(world, options);
    ADD_FAILURE() << "rank 1 connected without rank 0";
  } catch (const comm::CommError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0 never answered: it did not publish its store's address in torchrun's "
                                    "agent store at 127.0.0.1:" +
                                    std::to_string(world.master_port)));
  }
  // It does not hang: an error well within ctest's limit, however loaded the machine (20x the timeout).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
}

// The same agent store with both ranks there: rank 0 hosts fsdpp's own store on a port of its
// own (the agent's is taken) and publishes it, rank 1 finds it, and the world works. The two
// ranks are threads of this process, each with its own Communicator.
TEST(ConnectUnderTorchrun, BothRanksMeetThroughTheAgentStoreAndReduce) {
  auto agent = torchrun_agent_store();
  std::vector<float> sums(2, 0.0f);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  ranks.reserve(2);
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        comm::WorldSpec world;
        world.rank = r;
        world.world_size = 2;
        world.master_port = static_cast<int>(agent->getPort());
        world.agent_store = true;
        comm::CommOptions options;
        options.timeout = std::chrono::seconds(30);
        auto c = comm::Communicator::connect(world, options);
        auto t = at::full({4}, static_cast<float>(r + 1));
        c->all_reduce(t, comm::ReduceOp::Sum);
        sums[r] = t[3].item<float>();
        c->shutdown();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(sums[r], 3.0f) << "rank " << r;
  }
}

// Two ranks: after one all-reduce, rank 1 stays alive but never enters the second, until
// rank 0 has given up on it (rank 0's collective timeout).
LaunchReport rank_one_stalls(const harness::RunOptions& options) {
  return harness::run_ranks(
      2,
      [](RankContext& ctx) {
        all_reduce_ones(ctx);
        const auto done = ctx.shared_dir / "rank0-gave-up";
        if (ctx.rank == 1) {
          harness::wait_for_file(done, std::chrono::seconds(120));
          return;
        }
        try {
          all_reduce_ones(ctx);  // rank 1 never joins
        } catch (...) {
          std::ofstream(done) << "";
          throw;
        }
      },
      options);
}

// A peer that is alive but never enters the collective: after the timeout the waiting rank
// says no rank failed and every rank (all on this machine) is still running, and does not
// claim that a local rank cannot be checked.
TEST(RankFailures, APeerThatIsAliveButStallsIsReportedAsStillRunning) {
  auto report = rank_one_stalls(options_with(std::chrono::seconds(150), std::chrono::seconds(3), /*kill_all=*/false));
  const auto& waiting = report.ranks[0];
  EXPECT_EQ(waiting.status, RankStatus::Failed) << report.summary();
  EXPECT_THAT(waiting.message, HasSubstr("no rank has reported a failure and every rank is still running; here "
                                         "all_reduce[sum](1000 x Float)"));
  EXPECT_THAT(waiting.message, ::testing::Not(HasSubstr("cannot be checked")));
}

// Whether this process may enter a UTS namespace of its own (CAP_SYS_ADMIN), tried in a child.
bool can_own_a_host_name() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(::unshare(CLONE_NEWUTS) == 0 ? 0 : 1);
  int status = 0;
  return child > 0 && ::waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The same stall with the peer on another machine (its own host name, in a UTS namespace:
// the failure board tells machines apart by boot id and host name): its pid cannot be
// checked from here, so the waiting rank names it and its host as unknown, not as running.
TEST(RankFailures, AStalledPeerOnAnotherMachineIsNamedWithItsHostAsNotCheckable) {
  if (!can_own_a_host_name()) GTEST_SKIP() << "needs CAP_SYS_ADMIN to give a rank a host name of its own (unshare)";
  harness::RunOptions options = options_with(std::chrono::seconds(150), std::chrono::seconds(3), /*kill_all=*/false);
  options.before_connect = [](int rank) {
    const std::string name = "fsdpp-other-host";
    if (rank == 1 && (::unshare(CLONE_NEWUTS) != 0 || ::sethostname(name.c_str(), name.size()) != 0))
      throw std::runtime_error("rank 1 could not take a host name of its own");
  };
  auto report = rank_one_stalls(options);
  const auto& waiting = report.ranks[0];
  EXPECT_EQ(waiting.status, RankStatus::Failed) << report.summary();
  EXPECT_THAT(waiting.message, HasSubstr("no rank has reported a failure and every rank on this machine is still "
                                         "running; rank 1 on fsdpp-other-host cannot be checked from here; here "
                                         "all_reduce[sum](1000 x Float)"));
}

// Rank 2 is SIGKILLed after the given delay from the start of its connect: at any moment
// of the meeting, the Gloo mesh or the first collective, the others name it.
class ARankKilledWhileTheOthersConnect : public ::testing::TestWithParam<int> {};

TEST_P(ARankKilledWhileTheOthersConnect, IsNamedByThem) {
  const int delay_ms = GetParam();
  auto report = harness::run_ranks(
      3,
      [](RankContext& ctx) {
        if (ctx.rank == 2) std::this_thread::sleep_for(std::chrono::seconds(30));  // the kill comes first
        all_reduce_ones(ctx);
      },
      connect_trial([delay_ms](int rank) {
        if (rank != 2) return;
        std::thread([delay_ms] {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          std::raise(SIGKILL);
        }).detach();
      }));
  EXPECT_EQ(report.ranks[2].status, RankStatus::Crashed) << report.summary();
  expect_the_others_name(report, 2, "rank 2 (did not join the world|\\(pid [0-9]+ on [^)]*\\) is gone)");
}

INSTANTIATE_TEST_SUITE_P(DelaysMs, ARankKilledWhileTheOthersConnect, ::testing::Values(5, 30, 80, 200, 600));

TEST(ConnectFailures, ARankThatNeverConnectsASubgroupIsNamedAfterTheTimeout) {
  // Rank 2 is alive and in the world but never builds the subgroup the others wait in.
  auto report = harness::run_ranks(
      3,
      [](RankContext& ctx) {
        all_reduce_ones(ctx);
        if (ctx.rank == 2) {
          std::this_thread::sleep_for(kConnectTimeout + std::chrono::seconds(4));
          return;
        }
        ctx.comm.subgroup({0, 1, 2}, "late");
      },
      options_with(std::chrono::seconds(90), kConnectTimeout, /*kill_all=*/false));
  for (int r : {0, 1}) {
    const auto& rank = report.ranks[r];
    EXPECT_EQ(rank.status, RankStatus::Failed) << report.summary();
    EXPECT_THAT(rank.message, HasSubstr("every rank is still running; rank 2 never began connecting it"));
    EXPECT_THAT(rank.message, HasSubstr("here connecting group 'world/late' (rank " + std::to_string(r) + " of 3)"));
    EXPECT_LT(rank.ended_after_s, kConnectTimeout.count() + 5.0) << rank.message;
    EXPECT_GE(rank.ended_after_s, static_cast<double>(kConnectTimeout.count())) << "a timeout cannot fire early";
  }
}

TEST(RankSuccess, EveryRankSharesOneTemporaryDirectory) {
  harness::expect_ranks_pass(3, [](RankContext& ctx) {
    ASSERT_TRUE(std::filesystem::is_directory(ctx.shared_dir));
    std::ofstream(ctx.shared_dir / ("rank" + std::to_string(ctx.rank))) << ctx.rank;
    ctx.comm.barrier();
    for (int r = 0; r < ctx.world_size; ++r)
      EXPECT_TRUE(std::filesystem::exists(ctx.shared_dir / ("rank" + std::to_string(r))));
  });
}

}  // namespace
}  // namespace fsdpp
