#include "launcher/worker_env.h"

#include <gtest/gtest.h>

namespace ddprun::launcher {
namespace {

rendezvous::Assignment TwoNodeAssignment() {
  rendezvous::Assignment a;
  a.round = 3;
  a.group_rank = 1;
  a.group_world_size = 2;
  a.rank_offset = 4;
  a.world_size = 8;
  a.master_addr = "10.0.0.1";
  a.master_port = 29501;
  a.restart_count = 2;
  return a;
}

TEST(WorkerEnvTest, TorchrunVariables) {
  Environment base = {{"PATH", "/bin"}, {"HOME", "/root"}};
  WorkerEnvSpec spec;
  spec.run_id = "job";
  spec.local_rank = 3;
  spec.local_world_size = 4;
  spec.max_restarts = 5;
  spec.error_file = "/logs/attempt_3/3/error.json";
  Environment env = BuildWorkerEnv(base, spec, TwoNodeAssignment());
  EXPECT_EQ(env["PATH"], "/bin");  // inherited
  EXPECT_EQ(env["LOCAL_RANK"], "3");
  EXPECT_EQ(env["RANK"], "7");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["ROLE_RANK"], "7");
  EXPECT_EQ(env["ROLE_NAME"], "default");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["WORLD_SIZE"], "8");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "8");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29501");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "5");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job");
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "False");
  EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], "/logs/attempt_3/3/error.json");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(env["DDPRUN_ROUND"], "3");
  EXPECT_EQ(env["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
}

TEST(WorkerEnvTest, VirtualLocalRank) {
  WorkerEnvSpec spec;
  spec.local_rank = 3;
  spec.local_world_size = 4;
  spec.virtual_gpu = "7";
  Environment env =
      BuildWorkerEnv({{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}}, spec, TwoNodeAssignment());
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "7");
  EXPECT_EQ(env["RANK"], "7");  // the global rank is the real one
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
}

TEST(WorkerEnvTest, KeepsUserSettings) {
  Environment base = {{"OMP_NUM_THREADS", "8"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
  WorkerEnvSpec spec;
  spec.local_world_size = 4;
  Environment env = BuildWorkerEnv(base, spec, TwoNodeAssignment());
  EXPECT_EQ(env["OMP_NUM_THREADS"], "8");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "0");
  EXPECT_FALSE(ShouldDefaultOmpThreads(base, 4));
}

TEST(WorkerEnvTest, OmpDefaultOnlyWithSeveralWorkers) {
  EXPECT_FALSE(ShouldDefaultOmpThreads({}, 1));
  EXPECT_TRUE(ShouldDefaultOmpThreads({}, 2));
  WorkerEnvSpec spec;
  spec.local_world_size = 1;
  Environment env = BuildWorkerEnv({}, spec, TwoNodeAssignment());
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);
}

}  // namespace
}  // namespace ddprun::launcher
