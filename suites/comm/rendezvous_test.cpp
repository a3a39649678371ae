// Rendezvous from the environment: torchrun's and SLURM's variables, their precedence,
// SLURM host lists, and clear errors for bad values.
#include "core/comm/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace fsdpp::comm {
namespace {

using ::testing::HasSubstr;

TEST(Rendezvous, TorchrunVariablesDescribeTheWorld) {
  auto w = resolve_world(env_from_map({{"RANK", "5"},
                                       {"WORLD_SIZE", "8"},
                                       {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "4"},
                                       {"MASTER_ADDR", "10.0.0.7"},
                                       {"MASTER_PORT", "29400"}}));
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.master_addr, "10.0.0.7");
  EXPECT_EQ(w.master_port, 29400);
  EXPECT_EQ(w.source, "torchrun");
}

TEST(Rendezvous, SlurmVariablesDescribeTheSameWorld) {
  auto w = resolve_world(env_from_map({{"SLURM_PROCID", "5"},
                                       {"SLURM_NTASKS", "8"},
                                       {"SLURM_LOCALID", "1"},
                                       {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                       {"SLURM_JOB_NODELIST", "gpu[007-008]"},
                                       {"MASTER_PORT", "29400"}}));
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.master_addr, "gpu007");
  EXPECT_EQ(w.master_port, 29400);
  EXPECT_EQ(w.source, "slurm");
}

// Older SLURM releases set only SLURM_NODELIST; SLURM_JOB_NODELIST wins where both are set.
TEST(Rendezvous, SlurmsOlderNodelistVariableNamesTheMasterToo) {
  std::map<std::string, std::string> vars = {
      {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "cn[12-13]"}, {"MASTER_PORT", "29400"}};
  EXPECT_EQ(resolve_world(env_from_map(vars)).master_addr, "cn12");
  vars["SLURM_JOB_NODELIST"] = "gpu[3-4]";
  EXPECT_EQ(resolve_world(env_from_map(vars)).master_addr, "gpu3");
}

TEST(Rendezvous, TorchrunsAgentStoreIsUsedOnlyWhenItSaysSoAndNotUnderAnOwnMasterPort) {
  std::map<std::string, std::string> vars = {{"RANK", "1"},
                                             {"WORLD_SIZE", "2"},
                                             {"MASTER_PORT", "29400"},
                                             {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                             {"TORCHELASTIC_RESTART_COUNT", "3"}};
  auto w = resolve_world(env_from_map(vars));
  EXPECT_TRUE(w.agent_store);
  EXPECT_EQ(w.restart_count, 3);
  EXPECT_THAT(w.describe(), HasSubstr("source=torchrun agent_store"));
  WorldOverrides own_port;
  own_port.master_port = 29555;
  EXPECT_FALSE(resolve_world(env_from_map(vars), own_port).agent_store);
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(resolve_world(env_from_map(vars)).agent_store);
}

TEST(Rendezvous, TorchrunBeatsSlurmAndFlagsBeatBoth) {
  auto env = env_from_map({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "9"}});
  EXPECT_EQ(resolve_world(env).world_size, 2);
  WorldOverrides o;
  o.rank = 0;
  o.master_port = 1234;
  auto w = resolve_world(env, o);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.master_port, 1234);
  EXPECT_EQ(w.source, "explicit");
}

TEST(Rendezvous, NoVariablesMeansOneProcess) {
  auto w = resolve_world(env_from_map({}));
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.source, "single");
}

// The rank and port are checked after flags may have set them, so those two messages name
// the value, not an environment variable.
TEST(Rendezvous, BadValuesAreRejectedNamingTheVariableOrItsValue) {
  auto error_of = [](std::map<std::string, std::string> vars) {
    try {
      resolve_world(env_from_map(std::move(vars)));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), HasSubstr("RANK='x'"));
  EXPECT_THAT(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), HasSubstr("rank 2 is outside world size 2"));
  EXPECT_THAT(error_of({{"RANK", "0"}}), HasSubstr("RANK and WORLD_SIZE"));
  EXPECT_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}}), HasSubstr("master port 70000"));
  EXPECT_THAT(error_of({{"SLURM_PROCID", "0"}}), HasSubstr("SLURM_NTASKS"));
  // Below each variable's least value, and past int's range.
  EXPECT_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), HasSubstr("WORLD_SIZE='0': expected an integer >= 1"));
  EXPECT_THAT(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), HasSubstr("RANK='-1': expected an integer >= 0"));
  EXPECT_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "0"}}), HasSubstr("MASTER_PORT='0'"));
  EXPECT_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}), HasSubstr("WORLD_SIZE='99999999999'"));
  EXPECT_THAT(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_NODELIST", "a[1-"}}),
              HasSubstr("'a[1-': unbalanced"));
}

TEST(SlurmHostlist, ExpandsRangesListsAndPadding) {
  EXPECT_EQ(expand_slurm_hostlist("node[1-3],gpu[07,09-10],login"),
            (std::vector<std::string>{"node1", "node2", "node3", "gpu07", "gpu09", "gpu10", "login"}));
  EXPECT_EQ(first_slurm_host("rack[2-3]-n[5-6]"), "rack2-n5");
  EXPECT_EQ(expand_slurm_hostlist("rack[2-3]-n[5-6]").size(), 4u);
  EXPECT_THROW(expand_slurm_hostlist("n[3-1]"), std::invalid_argument);
  EXPECT_THROW(expand_slurm_hostlist("n[a-b]"), std::invalid_argument);
  EXPECT_THROW(expand_slurm_hostlist(""), std::invalid_argument);
}

// Property: compressing any list of numbered hosts into SLURM's bracket syntax and
// expanding it gives the list back, and the first host is the master.
RC_GTEST_PROP(SlurmHostlistProperty, CompressThenExpandRoundTrips, ()) {
  auto width = *rc::gen::inRange(1, 4);
  auto count = *rc::gen::inRange(1, 12);
  auto start = *rc::gen::inRange(0, 50);
  auto prefix = *rc::gen::element<std::string>("n", "gpu", "node-a", "x1y");
  std::vector<std::string> hosts;
  std::string ranges;
  int value = start;
  for (int i = 0; i < count; ++i) {
    int run = *rc::gen::inRange(1, 4);
    int lo = value, hi = value + run - 1;
    for (int v = lo; v <= hi; ++v) {
      std::string num = std::to_string(v);
      if (static_cast<int>(num.size()) < width) num.insert(0, width - num.size(), '0');
      hosts.push_back(prefix + num);
    }
    auto pad = [&](int v) {
      std::string s = std::to_string(v);
      if (static_cast<int>(s.size()) < width) s.insert(0, width - s.size(), '0');
      return s;
    };
    ranges += (i ? "," : "") + (lo == hi ? pad(lo) : pad(lo) + "-" + pad(hi));
    value = hi + 1 + *rc::gen::inRange(1, 3);
  }
  std::string list = prefix + "[" + ranges + "]";
  RC_ASSERT(expand_slurm_hostlist(list) == hosts);
  RC_ASSERT(first_slurm_host(list + ",other") == hosts.front());
}

}  // namespace
}  // namespace fsdpp::comm
