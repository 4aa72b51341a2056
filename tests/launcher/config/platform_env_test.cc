#include "launcher/config/platform_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ddprun::launcher {
namespace {

using ::testing::HasSubstr;

Environment Node(const std::string& rank, const std::string& world = "4") {
  return {{"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "23456"},
          {"WORLD_SIZE", world},
          {"RANK", rank},
          {"PATH", "/bin"}};
}

TEST(PlatformEnvTest, APlatformNodeBecomesAStaticMultiNodeWorld) {
  auto plan = PlanPlatform(Node("2"), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->has_value());
  EXPECT_EQ((*plan)->nodes, 4);
  EXPECT_EQ((*plan)->node_rank, 2);
  EXPECT_EQ((*plan)->master_addr, "10.0.0.1");
  EXPECT_EQ((*plan)->master_port, 23456);
  std::map<std::string, std::string> d;
  for (const FlagValue& f : (*plan)->defaults) d[f.flag] = f.value;
  EXPECT_EQ(d, (std::map<std::string, std::string>{{"rdzv-backend", "static"},
                                                   {"nnodes", "4"},
                                                   {"node-rank", "2"},
                                                   {"master-addr", "10.0.0.1"},
                                                   {"master-port", "23456"}}));
  LaunchOptions o;
  o.master_addr = "10.0.0.1";
  o.master_port = 23456;
  EXPECT_EQ(DescribePlatformPlan(**plan, o),
            "platform environment: node 2 of 4 (RANK, WORLD_SIZE), master 10.0.0.1:23456 "
            "(MASTER_ADDR, MASTER_PORT), static rendezvous; --no-platform-env or "
            "DDPRUN_NO_PLATFORM=1 ignores it");
}

TEST(PlatformEnvTest, NotAPlatformNode) {
  // Incomplete.
  Environment partial = Node("0");
  partial.erase("MASTER_PORT");
  EXPECT_FALSE(PlanPlatform(partial, {})->has_value());
  // A worker of torchrun, torch.distributed.launch --use_env or ddprun: RANK counts workers.
  for (const char* worker_var : {"LOCAL_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID"}) {
    Environment worker = Node("3");
    worker[worker_var] = "0";
    EXPECT_FALSE(PlanPlatform(worker, {})->has_value()) << worker_var;
  }
  // Slurm decides inside a Slurm job.
  Environment slurm = Node("1");
  slurm["SLURM_JOB_ID"] = "77";
  EXPECT_FALSE(PlanPlatform(slurm, {})->has_value());
  // Turned off, or the command line chose its own rendezvous.
  Environment off = Node("1");
  off["DDPRUN_NO_PLATFORM"] = "1";
  EXPECT_FALSE(PlanPlatform(off, {})->has_value());
  EXPECT_FALSE(
      PlanPlatform(Node("1"), {{"no-platform-env", "true", "--no-platform-env"}})->has_value());
  EXPECT_FALSE(PlanPlatform(Node("1"), {{"standalone", "true", "--standalone"}})->has_value());
  EXPECT_FALSE(PlanPlatform(Node("1"), {{"rdzv-backend", "c10d", "--rdzv-backend"}})->has_value());
  EXPECT_FALSE(PlanPlatform(Node("1"), {{"rdzv-endpoint", "h:1", "--rdzv-endpoint"}})->has_value());
  // An explicit static backend keeps it.
  EXPECT_TRUE(PlanPlatform(Node("1"), {{"rdzv-backend", "static", "--rdzv-backend"}})->has_value());
}

TEST(PlatformEnvTest, BadValuesAndContradictionsNameBothSides) {
  auto error = [](const Environment& env, const std::vector<FlagValue>& flags = {}) {
    auto plan = PlanPlatform(env, flags);
    EXPECT_FALSE(plan.ok());
    return std::string(plan.status().message());
  };
  EXPECT_EQ(error(Node("x")),
            "RANK=x: not a node rank below WORLD_SIZE=4 (platform environment; --no-platform-env "
            "or DDPRUN_NO_PLATFORM=1 ignores it)");
  EXPECT_THAT(error(Node("4")), HasSubstr("RANK=4: not a node rank below WORLD_SIZE=4"));
  EXPECT_THAT(error(Node("-1")), HasSubstr("RANK=-1: not a node rank"));
  EXPECT_THAT(error(Node("0", "zero")), HasSubstr("WORLD_SIZE=zero: not an integer"));
  Environment port = Node("0");
  port["MASTER_PORT"] = "70000";
  EXPECT_THAT(error(port), HasSubstr("MASTER_PORT=70000: must be in 1..65535"));
  EXPECT_THAT(error(Node("1"), {{"nnodes", "3", "--nnodes"}}),
              HasSubstr("--nnodes=3 contradicts WORLD_SIZE=4 (the node count)"));
  EXPECT_THAT(error(Node("1"), {{"node-rank", "0", "PET_NODE_RANK"}}),
              HasSubstr("PET_NODE_RANK=0 contradicts RANK=1 (this node's rank)"));
  Environment junk_off = Node("1");
  junk_off["DDPRUN_NO_PLATFORM"] = "maybe";
  EXPECT_THAT(error(junk_off), HasSubstr("DDPRUN_NO_PLATFORM=maybe"));
  // Agreeing flags are fine; an explicit master wins over the variables.
  auto plan = PlanPlatform(Node("1"), {{"nnodes", "4:4", "--nnodes"},
                                       {"node-rank", "1", "--node-rank"},
                                       {"master-port", "31000", "--master-port"}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->has_value());
}

}  // namespace
}  // namespace ddprun::launcher
