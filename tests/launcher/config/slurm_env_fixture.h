// A made-up Slurm job step (`srun -N2 --ntasks-per-node=1`, seen on the job's second node) and
// the real command line parser, for the Slurm tests of launcher/config and launcher/cmd.
#ifndef DDPRUN_TESTS_LAUNCHER_CONFIG_SLURM_ENV_FIXTURE_H_
#define DDPRUN_TESTS_LAUNCHER_CONFIG_SLURM_ENV_FIXTURE_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/config/cli.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {

class SlurmEnvTest : public ::testing::Test {
 protected:
  SlurmEnvTest() {
    script_ = dir_.File("train.py");
    testing::WriteFile(script_, "print('hi')\n");
    host_.cpu_count = 8;
    host_.gpu_count = 8;  // the node's; the step's come from Slurm
    host_.hostname = "gpu-a02";
    // `srun -N2 --ntasks-per-node=1` as seen on the job's second node.
    env_ = {{"PATH", "/usr/bin:/bin"},
            {"SLURM_JOB_ID", "4242"},
            {"SLURM_STEP_ID", "0"},
            {"SLURM_JOB_NODELIST", "gpu-a[01-04,07],gpu-b[1-2]"},
            {"SLURM_STEP_NODELIST", "gpu-a[01-02]"},
            {"SLURM_JOB_NUM_NODES", "7"},
            {"SLURM_NNODES", "2"},
            {"SLURM_STEP_NUM_NODES", "2"},
            {"SLURM_NODEID", "1"},
            {"SLURMD_NODENAME", "gpu-a02"},
            {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
            {"SLURM_TASKS_PER_NODE", "1(x7)"},
            {"SLURM_NTASKS", "2"},
            {"SLURM_STEP_NUM_TASKS", "2"},
            {"SLURM_PROCID", "1"},
            {"SLURM_LOCALID", "0"}};
  }

  absl::StatusOr<CommandLine> Parse(std::vector<std::string> args) {
    return ParseCommandLine(args, env_, host_);
  }

  std::string Error(std::vector<std::string> args) {
    auto r = ParseCommandLine(args, env_, host_);
    EXPECT_FALSE(r.ok()) << "parsed";
    if (r.ok()) return "";
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  }

  // Turns the environment into `srun -N2 --ntasks-per-node=2` task `procid`.
  void PerTask(int procid) {
    env_["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
    env_["SLURM_NTASKS_PER_NODE"] = "2";
    env_["SLURM_NTASKS"] = env_["SLURM_STEP_NUM_TASKS"] = "4";
    env_["SLURM_PROCID"] = std::to_string(procid);
    env_["SLURM_LOCALID"] = std::to_string(procid % 2);
    env_["SLURM_NODEID"] = std::to_string(procid / 2);
  }

  testing::TempDir dir_;
  std::string script_;
  Environment env_;
  HostInfo host_;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_TESTS_LAUNCHER_CONFIG_SLURM_ENV_FIXTURE_H_
