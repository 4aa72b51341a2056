#include "tests/integration/torchrun_reference.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>

#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::testing {
namespace {

// Runs one launcher command that dumps every worker's environment into `out`.
void DumpEnvWith(const std::vector<std::string>& launcher, const std::string& python,
                 const std::string& out) {
  std::vector<std::string> argv = launcher;
  argv.push_back(IntegrationScript("dump_env.py"));
  argv.push_back(out);
  TorchrunPortsLock lock(argv[0]);
  Subprocess p(argv, {{"PYTHON_EXEC", python}});
  auto st = p.Wait(std::chrono::seconds(90));
  ASSERT_TRUE(st.has_value()) << p.err();
  ASSERT_EQ(st->exit_code, 0) << p.out() << p.err();
}

}  // namespace

TorchrunReference Torchrun113() {
  TorchrunReference r;
  r.python = SystemPython();
  if (const char* env = getenv("DDPRUN_TORCHRUN"); env != nullptr) {
    r.torchrun = env;
  } else if (const std::string shared = SourcePath("../shared/tools/torchrun113");
             access(shared.c_str(), X_OK) == 0) {
    r.torchrun = shared;
  } else {
    r.torchrun = IntegrationScript("torchrun_py311.py");
  }
  return r;
}

nlohmann::json LoadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void CompareWithTorchrun(const TorchrunReference& ref,
                         const std::vector<std::string>& torchrun_flags,
                         const std::vector<std::string>& ddprun_flags, bool ports_random) {
  if (access(ref.torchrun.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "reference torchrun not found at " << ref.torchrun;
  }
  TempDir ref_dir, our_dir;
  std::vector<std::string> theirs_argv = {ref.torchrun};
  theirs_argv.insert(theirs_argv.end(), torchrun_flags.begin(), torchrun_flags.end());
  std::vector<std::string> ours_argv = {BinPath("ddprun")};
  ours_argv.insert(ours_argv.end(), ddprun_flags.begin(), ddprun_flags.end());
  DumpEnvWith(theirs_argv, ref.python, ref_dir.path());
  DumpEnvWith(ours_argv, ref.python, our_dir.path());
  // Allowed differences: values that are random per run, the error file's location (a temp
  // directory either way), and, against 1.13, the NCCL variable's modern name.
  // TORCHELASTIC_USE_AGENT_STORE: ddprun's agent hosts the store in every mode ("True"), as
  // torchrun 2.11's does in every mode and 1.13's static agent does; 1.13's c10d agent
  // (--standalone) hosts none ("False").
  // MASTER_PORT: a one-node job gets a free port that ddprun holds (as torch 2.12 does), where
  // torchrun takes 29500.
  std::set<std::string> random_values = {"TORCHELASTIC_ERROR_FILE", "MASTER_PORT"};
  if (ports_random) {
    random_values.insert({"MASTER_PORT", "TORCHELASTIC_RUN_ID", "MASTER_ADDR"});
    if (!ref.torch2) random_values.insert("TORCHELASTIC_USE_AGENT_STORE");
  }
  const std::set<std::string> renamed = {"NCCL_ASYNC_ERROR_HANDLING"};
  // ddprun's own (the in-process round, the step reports' file); against 1.13 also the two that
  // torch 2.x's launcher exports and Debian's 1.13 does not. Against 2.11 those two are compared.
  std::set<std::string> ddprun_extra = {"DDPRUN_ROUND", "DDPRUN_PROGRESS_FILE"};
  if (!ref.torch2) {
    ddprun_extra.insert({"TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE"});
  }
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string name = "/rank" + std::to_string(rank) + ".json";
    auto theirs = LoadJson(ref_dir.path() + name);
    auto mine = LoadJson(our_dir.path() + name);
    int compared = 0;
    for (auto& [key, value] : theirs.items()) {
      if (!ref.torch2 && renamed.count(key) > 0) {
        EXPECT_EQ(mine["TORCH_" + key], value) << key;
        continue;
      }
      ASSERT_TRUE(mine.contains(key)) << "ddprun does not set " << key;
      if (random_values.count(key) > 0) continue;
      EXPECT_EQ(mine[key], value) << key;
      ++compared;
    }
    for (auto& [key, value] : mine.items()) {
      if (ddprun_extra.count(key) == 0) {
        EXPECT_TRUE(theirs.contains(key)) << "ddprun sets " << key << " that torchrun does not";
      }
    }
    EXPECT_GT(compared, 10);
    if (ref.torch2) {
      EXPECT_EQ(theirs["TORCH_NCCL_ASYNC_ERROR_HANDLING"], mine["TORCH_NCCL_ASYNC_ERROR_HANDLING"]);
      EXPECT_EQ(theirs["TORCHELASTIC_SIGNALS_TO_HANDLE"], mine["TORCHELASTIC_SIGNALS_TO_HANDLE"]);
    }
    EXPECT_EQ(mine["TORCHELASTIC_USE_AGENT_STORE"], "True");
    EXPECT_THAT(mine["TORCHELASTIC_ERROR_FILE"].get<std::string>(),
                ::testing::EndsWith("/attempt_0/" + std::to_string(rank) + "/error.json"));
    if (ports_random) {
      EXPECT_EQ(mine["MASTER_ADDR"], "127.0.0.1");
    }
    EXPECT_NE(mine["MASTER_PORT"], "");
    EXPECT_NE(mine["MASTER_PORT"], "29500");
  }
}

}  // namespace ddprun::testing
