// DistEnv parsing, the error file format and metrics lines: the worker's plain-C++ edges.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"
#include "trainer/io/dist_env.h"
#include "trainer/io/error_file.h"
#include "trainer/io/metrics.h"

namespace ddprun::trainer {
namespace {

using ::testing::HasSubstr;

EnvGetter FakeEnv(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(DistEnvTest, NothingSetIsSingleProcess) {
  absl::StatusOr<DistEnv> env = ReadDistEnv(FakeEnv({}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->store_prefix, "/ddp-train");
  EXPECT_EQ(env->progress_file, "");
  EXPECT_EQ(env->control_socket, "");
}

TEST(DistEnvTest, TorchrunVariables) {
  absl::StatusOr<DistEnv> env = ReadDistEnv(FakeEnv({{"RANK", "3"},
                                                     {"WORLD_SIZE", "4"},
                                                     {"LOCAL_RANK", "1"},
                                                     {"LOCAL_WORLD_SIZE", "2"},
                                                     {"MASTER_ADDR", "10.0.0.1"},
                                                     {"MASTER_PORT", "1234"},
                                                     {"TORCHELASTIC_RESTART_COUNT", "2"},
                                                     {"TORCHELASTIC_ERROR_FILE", "/e.json"},
                                                     {"DDPRUN_PROGRESS_FILE", "/run/p.fifo"},
                                                     {"DDPRUN_CONTROL_SOCKET", "/run/c.sock"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 1234);
  EXPECT_EQ(env->restart_count, 2);
  // Not the restart count: torchrun counts restarts per agent, and a node that joined later
  // (count 0) must meet the survivors (count 2) on the same keys of the round's fresh store.
  EXPECT_EQ(env->store_prefix, "/ddp-train");
  EXPECT_EQ(env->error_file, "/e.json");
  EXPECT_EQ(env->progress_file, "/run/p.fifo");
  EXPECT_EQ(env->control_socket, "/run/c.sock");
  EXPECT_FALSE(env->use_agent_store);
}

TEST(DistEnvTest, AgentStoreUsesTorchPrefix) {
  absl::StatusOr<DistEnv> env = ReadDistEnv(FakeEnv({{"RANK", "0"},
                                                     {"WORLD_SIZE", "2"},
                                                     {"MASTER_ADDR", "h"},
                                                     {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                     {"TORCHELASTIC_RESTART_COUNT", "1"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->use_agent_store);
  EXPECT_EQ(env->store_prefix, "/worker/attempt_1");
}

TEST(DistEnvTest, DdprunRoundScopesThePrefix) {
  absl::StatusOr<DistEnv> env = ReadDistEnv(FakeEnv({{"RANK", "0"},
                                                     {"WORLD_SIZE", "2"},
                                                     {"MASTER_ADDR", "h"},
                                                     {"TORCHELASTIC_RESTART_COUNT", "1"},
                                                     {"DDPRUN_ROUND", "7"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->store_prefix, "/ddp-train/round_7");
  EXPECT_FALSE(ReadDistEnv(FakeEnv({{"DDPRUN_ROUND", "x"}})).ok());
}

TEST(DistEnvTest, SlurmFallback) {
  absl::StatusOr<DistEnv> env = ReadDistEnv(FakeEnv({{"SLURM_PROCID", "5"},
                                                     {"SLURM_NTASKS", "8"},
                                                     {"SLURM_LOCALID", "1"},
                                                     {"SLURM_NTASKS_PER_NODE", "2(x4)"},
                                                     {"SLURM_LAUNCH_NODE_IPADDR", "10.1.1.1"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->from_slurm);
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "10.1.1.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->local_world_size, 2);
}

TEST(DistEnvTest, BadValuesNamed) {
  EXPECT_THAT(ReadDistEnv(FakeEnv({{"RANK", "x"}, {"WORLD_SIZE", "2"}})).status().message(),
              HasSubstr("RANK=x"));
  EXPECT_THAT(ReadDistEnv(FakeEnv({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}))
                  .status()
                  .message(),
              HasSubstr("not below WORLD_SIZE"));
  EXPECT_THAT(ReadDistEnv(FakeEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}})).status().message(),
              HasSubstr("MASTER_ADDR"));
  EXPECT_THAT(ReadDistEnv(FakeEnv({{"RANK", "0"}})).status().message(), HasSubstr("WORLD_SIZE"));
}

TEST(ErrorFileTest, TorchRecordShape) {
  nlohmann::json j =
      nlohmann::json::parse(FormatErrorFile("InputError", "bad \"file\"", "trace", 17));
  EXPECT_EQ(j["message"]["message"], "InputError: bad \"file\"");
  EXPECT_EQ(j["message"]["extraInfo"]["py_callstack"], "trace");
  EXPECT_EQ(j["message"]["extraInfo"]["timestamp"], "17");
}

TEST(ErrorFileTest, WritesFileAtomically) {
  ::ddprun::testing::TempDir dir;
  ASSERT_TRUE(WriteErrorFile(dir.File("err.json"), "RuntimeError", "boom", "cs").ok());
  nlohmann::json j = nlohmann::json::parse(::ddprun::testing::ReadFile(dir.File("err.json")));
  EXPECT_EQ(j["message"]["message"], "RuntimeError: boom");
  EXPECT_TRUE(WriteErrorFile("", "X", "y", "z").ok());
}

TEST(MetricsTest, OneJsonLinePerEpoch) {
  ::ddprun::testing::TempDir dir;
  MetricsWriter w;
  ASSERT_TRUE(w.Open(dir.File("m.jsonl")).ok());
  EpochMetrics m;
  m.epoch = 2;
  m.world_size = 4;
  m.test_acc = 0.875;
  ASSERT_TRUE(w.Write(m).ok());
  m.epoch = 3;
  ASSERT_TRUE(w.Write(m).ok());
  const std::string text = ::ddprun::testing::ReadFile(dir.File("m.jsonl"));
  const size_t nl = text.find('\n');
  ASSERT_NE(nl, std::string::npos);
  nlohmann::json first = nlohmann::json::parse(text.substr(0, nl));
  for (const char* key :
       {"epoch", "world_size", "samples_per_s", "train_loss", "test_loss", "test_acc", "wall_s"}) {
    EXPECT_TRUE(first.contains(key)) << key;
  }
  EXPECT_EQ(first["epoch"], 2);
  EXPECT_EQ(first["test_acc"], 0.875);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
}

TEST(MetricsTest, UnopenableFileNamed) {
  MetricsWriter w;
  absl::Status s = w.Open("/nonexistent-dir/m.jsonl");
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent-dir/m.jsonl"));
}

}  // namespace
}  // namespace ddprun::trainer
