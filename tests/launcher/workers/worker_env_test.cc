#include "launcher/workers/worker_env.h"

#include <gtest/gtest.h>

#include <iterator>
#include <set>
#include <string>

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
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True");  // the agent hosts the store
  EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], "/logs/attempt_3/3/error.json");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(env["DDPRUN_ROUND"], "3");
  EXPECT_EQ(env["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
}

TEST(WorkerEnvTest, TheRendezvousTokenStaysWithTheAgent) {
  // Issue 28: a worker holding the shared token could speak to the rendezvous server as an agent.
  Environment base = {{"PATH", "/bin"}, {"DDPRUN_RDZV_TOKEN", "secret"}};
  WorkerEnvSpec spec;
  spec.local_world_size = 1;
  EXPECT_EQ(BuildWorkerEnv(base, spec, TwoNodeAssignment()).count("DDPRUN_RDZV_TOKEN"), 0u);
  EXPECT_EQ(BuildSpareEnv(base, spec).count("DDPRUN_RDZV_TOKEN"), 0u);
  EXPECT_EQ(BuildWorkerEnv(base, spec, TwoNodeAssignment())["PATH"], "/bin");
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

// --preload: a spare starts with every variable that is the same at every start, and the
// hand-over brings exactly the ones that can differ. Two starts as different as can be (round,
// ranks, master, restart count, error file) differ only in kPerStartVariables.
TEST(WorkerEnvTest, SpareEnvIsTheWorkerEnvWithoutExactlyThePerStartVariables) {
  const Environment base = {{"PATH", "/bin"}, {"RANK", "7"}, {"OMP_NUM_THREADS", "4"}};
  WorkerEnvSpec spec;
  spec.run_id = "job";
  spec.local_rank = 1;
  spec.local_world_size = 2;
  spec.max_restarts = 3;
  spec.virtual_gpu = "5";
  WorkerEnvSpec first = spec, later = spec;
  first.error_file = "/logs/attempt_0/1/error.json";
  later.error_file = "/logs/attempt_4/1/error.json";
  rendezvous::Assignment a;
  a.round = 1;
  a.world_size = 2;
  a.group_world_size = 1;
  a.master_addr = "127.0.0.1";
  a.master_port = 1234;
  const Environment cold_first = BuildWorkerEnv(base, first, a);
  const Environment cold_later = BuildWorkerEnv(base, later, TwoNodeAssignment());

  const std::set<std::string> per_start(std::begin(kPerStartVariables),
                                        std::end(kPerStartVariables));
  for (const auto& [key, value] : cold_first) {
    auto it = cold_later.find(key);
    if (it == cold_later.end() || it->second != value) {
      EXPECT_EQ(per_start.count(key), 1u) << key << " differs between starts";
    }
  }
  const Environment spare = BuildSpareEnv(base, spec);
  for (const std::string& key : per_start) EXPECT_EQ(spare.count(key), 0u) << key;
  for (const auto& [key, value] : cold_later) {
    if (per_start.count(key) > 0) continue;
    auto it = spare.find(key);
    ASSERT_NE(it, spare.end()) << key << " missing from the spare's environment";
    EXPECT_EQ(it->second, value) << key;
  }
  EXPECT_EQ(spare.size() + per_start.size(), cold_later.size());
  EXPECT_EQ(spare.at("LOCAL_RANK"), "0");  // --virtual-local-rank
  EXPECT_EQ(spare.at("CUDA_VISIBLE_DEVICES"), "5");
}

}  // namespace
}  // namespace ddprun::launcher
