// Slurm defaults and mode, through the real command line parser with made-up job environments:
// what a step implies, what explicit flags override, what contradicts and how it is reported,
// (the per-task worker environment: tests/launcher/cmd/slurm_per_task_test.cc).
#include "launcher/config/slurm_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/launcher/config/slurm_env_fixture.h"

namespace ddprun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(SlurmEnvTest, AgentModeDefaultsFromTheStep) {
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->slurm.has_value());
  EXPECT_EQ(r->slurm->mode, SlurmMode::kAgent);
  const LaunchOptions& o = r->options;
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.max_nodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(RdzvBackendName(o.rdzv_backend), "c10d");
  EXPECT_EQ(o.rdzv_id, "4242.0");
  const int port = SlurmRdzvPort("4242", "0");
  EXPECT_EQ(o.rdzv_endpoint, "gpu-a01:" + std::to_string(port));
  EXPECT_EQ(o.rdzv.is_host, false);  // gpu-a02 is not the first node
  EXPECT_EQ(o.nproc_per_node, 1);    // no GPU in the step
  EXPECT_THAT(o.extra_signals, ElementsAre(SIGUSR1, SIGUSR2));
  EXPECT_EQ(DescribeSlurmPlan(*r->slurm, o),
            "Slurm job 4242 step 0: agent mode, 2 nodes, node rank 1, 1 worker per node, "
            "rendezvous c10d gpu-a01:" +
                std::to_string(port));
}

TEST_F(SlurmEnvTest, FirstNodeHostsTheRendezvous) {
  env_["SLURM_NODEID"] = "0";
  env_["SLURMD_NODENAME"] = "gpu-a01";
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.rdzv.is_host, true);
  EXPECT_EQ(r->options.node_rank, 0);
}

TEST_F(SlurmEnvTest, NoStepNodelistFallsBackToTheJobs) {
  env_.erase("SLURM_STEP_NODELIST");
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->options.rdzv_endpoint, HasSubstr("gpu-a01:"));
}

TEST_F(SlurmEnvTest, NodeCountFallsBackToSlurmNnodes) {
  env_.erase("SLURM_STEP_NUM_NODES");
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.max_nodes, 2);  // SLURM_NNODES, not the job's 7
}

TEST_F(SlurmEnvTest, PortsAreStablePerJobAndStepAndBelowTheEphemeralRange) {
  EXPECT_EQ(SlurmRdzvPort("4242", "0"), SlurmRdzvPort("4242", "0"));
  EXPECT_NE(SlurmRdzvPort("4242", "0"), SlurmRdzvPort("4242", "1"));
  EXPECT_NE(SlurmRdzvPort("4242", "0"), SlurmRdzvPort("4243", "0"));
  for (int job = 0; job < 10000; job += 7) {
    const int p = SlurmRdzvPort(std::to_string(job), "3");
    const int m = SlurmMasterPort(std::to_string(job), "3");
    EXPECT_GE(p, 20000);
    EXPECT_LT(m, 32768);
    EXPECT_NE(p, m);
  }
}

TEST_F(SlurmEnvTest, GpusOfTheStep) {
  env_["SLURM_STEP_GPUS"] = "2,3";
  env_["CUDA_VISIBLE_DEVICES"] = "0,1";
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.nproc_per_node, 2);

  env_.erase("SLURM_STEP_GPUS");
  env_["SLURM_GPUS_ON_NODE"] = "4";
  r = Parse({"--nproc-per-node=gpu", script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.nproc_per_node, 4);

  env_.erase("SLURM_GPUS_ON_NODE");
  env_["CUDA_VISIBLE_DEVICES"] = "0,1,2";
  r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.nproc_per_node, 3);
}

TEST_F(SlurmEnvTest, GpuWithoutGpusInTheStepIsAUsageError) {
  // The node has 8 GPUs (host_), the step none: Slurm's word counts.
  EXPECT_THAT(Error({"--nproc-per-node=gpu", script_}),
              HasSubstr("--nproc-per-node=gpu: the Slurm step has no GPU on this node"));
  env_["PET_NPROC_PER_NODE"] = "gpu";
  EXPECT_THAT(Error({script_}), HasSubstr("PET_NPROC_PER_NODE=gpu: the Slurm step has no GPU"));
}

TEST_F(SlurmEnvTest, ExplicitFlagsWin) {
  auto r = Parse({"--rdzv-endpoint=login1:29400", "--rdzv-id=myrun", "--nproc-per-node=3",
                  "--max-restarts=2", "--nnodes=1:2", "--signals-to-handle=SIGUSR2", script_});
  ASSERT_TRUE(r.ok()) << r.status();
  const LaunchOptions& o = r->options;
  EXPECT_EQ(o.rdzv_endpoint, "login1:29400");
  EXPECT_FALSE(o.rdzv.is_host.has_value());  // the user's server decides where it runs
  EXPECT_EQ(o.rdzv_id, "myrun");
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.min_nodes, 1);
  EXPECT_EQ(o.max_nodes, 2);
  EXPECT_THAT(o.extra_signals, ElementsAre(SIGUSR2));
}

TEST_F(SlurmEnvTest, PetVariablesAndYamlAreExplicitToo) {
  env_["PET_RDZV_ID"] = "from-pet";
  testing::WriteFile(dir_.File("job.yaml"), "nproc-per-node: 2\n");
  auto r = Parse({"--config", dir_.File("job.yaml"), script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.rdzv_id, "from-pet");
  EXPECT_EQ(r->options.nproc_per_node, 2);
}

TEST_F(SlurmEnvTest, UserIsHostWinsOverSlurms) {
  auto r = Parse({"--rdzv-conf=is_host=1,join_timeout=5", script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.rdzv.is_host, true);
  EXPECT_EQ(r->options.rdzv.timeouts.join_timeout, std::chrono::seconds(5));
}

TEST_F(SlurmEnvTest, ContradictionsAreReportedWithBothSides) {
  EXPECT_EQ(Error({"--nnodes=3", script_}),
            "--nnodes=3 contradicts the Slurm step's 2 nodes (SLURM_STEP_NUM_NODES=2) (pass "
            "--no-slurm to ignore Slurm)");
  EXPECT_THAT(Error({"--nnodes=3:4", script_}), HasSubstr("--nnodes=3:4 contradicts"));
  EXPECT_EQ(Error({"--node-rank=0", script_}),
            "--node-rank=0 contradicts SLURM_NODEID=1 (pass --no-slurm to ignore Slurm)");
  EXPECT_THAT(Error({"--standalone", script_}),
              HasSubstr("--standalone=true contradicts the Slurm step's 2 nodes"));
  env_["PET_NNODES"] = "1";
  EXPECT_THAT(Error({script_}), HasSubstr("PET_NNODES=1 contradicts"));
}

TEST_F(SlurmEnvTest, AgreeingFlagsAreFine) {
  auto r = Parse({"--nnodes=2", "--node-rank=1", script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.node_rank, 1);
}

TEST_F(SlurmEnvTest, StandaloneInAOneNodeStep) {
  env_["SLURM_STEP_NODELIST"] = "gpu-a01";
  env_["SLURM_STEP_NUM_NODES"] = "1";
  env_["SLURM_STEP_TASKS_PER_NODE"] = "1";
  env_["SLURM_NODEID"] = "0";
  env_["SLURM_PROCID"] = "0";
  env_["SLURM_STEP_NUM_TASKS"] = "1";
  env_["SLURM_GPUS_ON_NODE"] = "4";
  auto r = Parse({"--standalone", script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->options.standalone);
  EXPECT_EQ(r->options.nproc_per_node, 4);
  EXPECT_EQ(RdzvBackendName(r->options.rdzv_backend), "static");
  EXPECT_THAT(DescribeSlurmPlan(*r->slurm, r->options),
              HasSubstr("4 workers per node, standalone"));
}

TEST_F(SlurmEnvTest, StandaloneFalseIsNotStandalone) {
  env_["PET_STANDALONE"] = "0";
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->options.standalone);
  EXPECT_EQ(RdzvBackendName(r->options.rdzv_backend), "c10d");
}

TEST_F(SlurmEnvTest, StaticBackendGetsMasterFromTheStep) {
  auto r = Parse({"--rdzv-backend=static", script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->options.master_addr, "gpu-a01");
  EXPECT_EQ(r->options.master_port, SlurmMasterPort("4242", "0"));
  EXPECT_EQ(r->options.node_rank, 1);
  EXPECT_EQ(r->options.max_nodes, 2);
}

TEST_F(SlurmEnvTest, OptOut) {
  auto r = Parse({"--no-slurm", script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->slurm.has_value());
  EXPECT_EQ(RdzvBackendName(r->options.rdzv_backend), "static");
  EXPECT_EQ(r->options.max_nodes, 1);
  env_["DDPRUN_NO_SLURM"] = "1";
  r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->slurm.has_value());
  // --no-slurm also skips an unusable Slurm environment.
  env_.erase("DDPRUN_NO_SLURM");
  env_["SLURM_STEP_NODELIST"] = "n[1-";
  EXPECT_TRUE(Parse({"--no-slurm", script_}).ok());
}

TEST_F(SlurmEnvTest, UnparsableNodeListIsAUsageError) {
  env_["SLURM_STEP_NODELIST"] = "gpu-a[01-";
  EXPECT_EQ(Error({script_}),
            "SLURM_STEP_NODELIST: hostlist 'gpu-a[01-': expected a number at position 9");
}

TEST_F(SlurmEnvTest, BadSlurmNumbersAreUsageErrors) {
  env_["SLURM_NODEID"] = "x";
  EXPECT_THAT(Error({script_}), HasSubstr("SLURM_NODEID"));
  env_["SLURM_NODEID"] = "5";
  EXPECT_THAT(Error({script_}), HasSubstr("SLURM_NODEID=5: not below SLURM_STEP_NUM_NODES=2"));
  env_["SLURM_NODEID"] = "1";
  env_["SLURM_STEP_TASKS_PER_NODE"] = "2(y2)";
  EXPECT_THAT(Error({script_}), HasSubstr("SLURM_STEP_TASKS_PER_NODE=2(y2)"));
}

TEST_F(SlurmEnvTest, OutsideSrunOnlyThisNode) {
  env_.erase("SLURM_STEP_ID");
  env_.erase("SLURM_STEP_NODELIST");
  env_.erase("SLURM_STEP_NUM_NODES");
  env_.erase("SLURM_STEP_TASKS_PER_NODE");
  env_["SLURM_NODEID"] = "0";
  env_["SLURM_TASKS_PER_NODE"] = "4(x7)";  // the job's layout; irrelevant to one process
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->slurm->mode, SlurmMode::kAgent);
  EXPECT_EQ(r->options.max_nodes, 1);
  EXPECT_EQ(r->options.rdzv_id, "4242");
  EXPECT_THAT(r->slurm->warnings, ElementsAre(HasSubstr("outside srun")));
  EXPECT_THAT(DescribeSlurmPlan(*r->slurm, r->options),
              HasSubstr("Slurm job 4242 (batch script, outside srun): agent mode, 1 node"));
}

TEST_F(SlurmEnvTest, TasksPerNodeFormats) {
  EXPECT_THAT(*ParseTasksPerNode("v", "2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(*ParseTasksPerNode("v", "4"), ElementsAre(4));
  EXPECT_FALSE(ParseTasksPerNode("v", "2(x)").ok());
  EXPECT_FALSE(ParseTasksPerNode("v", "").ok());
  EXPECT_FALSE(ParseTasksPerNode("v", "1(x99999999)").ok());
}

TEST_F(SlurmEnvTest, SeveralTasksPerNodeMeansPerTaskMode) {
  PerTask(3);
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->slurm->mode, SlurmMode::kPerTask);
  EXPECT_EQ(r->options.master_addr, "gpu-a01");
  EXPECT_EQ(r->options.master_port, SlurmMasterPort("4242", "0"));
  EXPECT_EQ(DescribeSlurmPlan(*r->slurm, r->options),
            "Slurm job 4242 step 0: per-task mode, rank 3 of 4, local rank 1 of 2, master "
            "gpu-a01:" +
                std::to_string(SlurmMasterPort("4242", "0")) + " (no agent; Slurm restarts)");
}

TEST_F(SlurmEnvTest, UnevenTasksStillPerTask) {
  // srun -N2 -n3: "2,1"; every task must choose the same mode.
  env_["SLURM_STEP_TASKS_PER_NODE"] = "2,1";
  env_["SLURM_STEP_NUM_TASKS"] = "3";
  env_["SLURM_PROCID"] = "2";
  env_["SLURM_NODEID"] = "1";
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->slurm->mode, SlurmMode::kPerTask);
  EXPECT_EQ(r->slurm->step.LocalTasks(), 1);
}

TEST_F(SlurmEnvTest, PerTaskRefusesSeveralWorkersPerTask) {
  PerTask(0);
  EXPECT_THAT(Error({"--nproc-per-node=2", script_}),
              HasSubstr("--nproc-per-node=2 contradicts 2 Slurm tasks per node "
                        "(SLURM_STEP_TASKS_PER_NODE): in per-task mode each Slurm task is one"));
  EXPECT_THAT(Error({"--standalone", script_}), HasSubstr("--standalone=true contradicts 2 Slurm"));
  EXPECT_TRUE(Parse({"--nproc-per-node=1", script_}).ok());
}

TEST_F(SlurmEnvTest, PerTaskWarnsAboutAgentFlagsItIgnores) {
  PerTask(0);
  auto r = Parse({"--max-restarts=3", "--log-dir=/tmp/x", script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->slurm->warnings,
              ElementsAre("per-task mode runs no agent; ignored: --max-restarts=3, "
                          "--log-dir=/tmp/x (Slurm delivers signals and requeues; run one task "
                          "per node for the agent)"));
  EXPECT_TRUE(Parse({script_})->slurm->warnings.empty());
}

TEST_F(SlurmEnvTest, NotInSlurm) {
  env_.erase("SLURM_JOB_ID");
  auto r = Parse({script_});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->slurm.has_value());
}

}  // namespace
}  // namespace ddprun::launcher
