// Slurm's per-task mode: the environment a task execs with, from the real command line parser.
#include "launcher/cmd/slurm_per_task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "launcher/config/slurm_env.h"
#include "tests/launcher/config/slurm_env_fixture.h"

namespace ddprun::launcher {
namespace {

using ::testing::ElementsAre;

TEST_F(SlurmEnvTest, PerTaskEnvironmentIsTorchruns) {
  PerTask(3);
  env_["SLURM_RESTART_COUNT"] = "2";
  auto r = Parse({"--no-python", "/bin/true", "a1", "--b"});
  ASSERT_TRUE(r.ok()) << r.status();
  const ExecSpec spec = PerTaskExecSpec(*r->slurm, r->options, env_);
  EXPECT_EQ(spec.program, "/bin/true");
  EXPECT_THAT(spec.argv, ElementsAre("/bin/true", "a1", "--b"));
  const Environment& e = spec.env;
  EXPECT_EQ(e.at("RANK"), "3");
  EXPECT_EQ(e.at("LOCAL_RANK"), "1");
  EXPECT_EQ(e.at("WORLD_SIZE"), "4");
  EXPECT_EQ(e.at("GROUP_RANK"), "1");
  EXPECT_EQ(e.at("GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(e.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(e.at("ROLE_RANK"), "3");
  EXPECT_EQ(e.at("ROLE_WORLD_SIZE"), "4");
  EXPECT_EQ(e.at("ROLE_NAME"), "default");
  EXPECT_EQ(e.at("MASTER_ADDR"), "gpu-a01");
  EXPECT_EQ(e.at("MASTER_PORT"), std::to_string(SlurmMasterPort("4242", "0")));
  EXPECT_EQ(e.at("TORCHELASTIC_RUN_ID"), "4242.0");
  EXPECT_EQ(e.at("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(e.at("TORCHELASTIC_MAX_RESTARTS"), "0");
  // No agent stays in per-task mode: the worker of rank 0 hosts the store, as without ddprun.
  EXPECT_EQ(e.at("TORCHELASTIC_USE_AGENT_STORE"), "False");
  EXPECT_EQ(e.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(e.count("TORCHELASTIC_ERROR_FILE"), 0u);
  EXPECT_EQ(e.at("SLURM_PROCID"), "3");  // the task's own environment is kept
}

TEST_F(SlurmEnvTest, PerTaskPythonAndExplicitMaster) {
  PerTask(0);
  env_["PYTHON_EXEC"] = "/usr/bin/python3";
  auto r = Parse({"--master-addr=10.0.0.9", "--master-port=1234", script_, "x"});
  ASSERT_TRUE(r.ok()) << r.status();
  const ExecSpec spec = PerTaskExecSpec(*r->slurm, r->options, env_);
  EXPECT_THAT(spec.argv, ElementsAre("/usr/bin/python3", "-u", script_, "x"));
  EXPECT_EQ(spec.env.at("MASTER_ADDR"), "10.0.0.9");
  EXPECT_EQ(spec.env.at("MASTER_PORT"), "1234");
}

}  // namespace
}  // namespace ddprun::launcher
