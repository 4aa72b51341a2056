#include "launcher/workers/worker_command.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

using ::testing::ElementsAre;

TEST(BuildWorkerCommandTest, PythonScriptModuleAndProgram) {
  LaunchOptions o;
  o.entrypoint_kind = EntrypointKind::kPythonScript;
  o.entrypoint = "train_${local_rank}.py";
  o.entrypoint_args = {"--local-rank=$local_rank", "--literal=$$x"};
  WorkerCommand c = BuildWorkerCommand(o, {{"PYTHON_EXEC", "/opt/py/bin/python"}}, 1);
  EXPECT_EQ(c.program, "/opt/py/bin/python");
  EXPECT_THAT(c.argv, ElementsAre("/opt/py/bin/python", "-u", "train_1.py", "--local-rank=1",
                                  "--literal=$x"));

  o.entrypoint_kind = EntrypointKind::kPythonModule;
  o.entrypoint = "pkg.train";
  c = BuildWorkerCommand(o, {}, 0);
  EXPECT_EQ(c.program, "python3");
  EXPECT_THAT(c.argv,
              ElementsAre("python3", "-u", "-m", "pkg.train", "--local-rank=0", "--literal=$x"));

  o.entrypoint_kind = EntrypointKind::kBinary;
  o.entrypoint = "/bin/echo";
  o.entrypoint_args = {"${local_rank}"};
  c = BuildWorkerCommand(o, {}, 7);
  EXPECT_EQ(c.program, "/bin/echo");
  EXPECT_THAT(c.argv, ElementsAre("/bin/echo", "7"));
}

TEST(BuildWorkerCommandTest, LaunchStyleLocalRankFollowsTheScriptUnlessUseEnv) {
  LaunchOptions o;
  o.entrypoint_kind = EntrypointKind::kPythonScript;
  o.entrypoint = "main.py";
  o.entrypoint_args = {"--epochs", "3"};
  o.local_rank_arg = "local_rank";
  EXPECT_THAT(BuildWorkerCommand(o, {}, 2).argv,
              ElementsAre("python3", "-u", "main.py", "--local_rank=2", "--epochs", "3"));
  o.local_rank_arg = "local-rank";
  EXPECT_THAT(BuildWorkerCommand(o, {}, 0).argv,
              ElementsAre("python3", "-u", "main.py", "--local-rank=0", "--epochs", "3"));
  o.use_env = true;  // launch's --use_env: the environment only
  EXPECT_THAT(BuildWorkerCommand(o, {}, 0).argv,
              ElementsAre("python3", "-u", "main.py", "--epochs", "3"));
}

}  // namespace
}  // namespace ddprun::launcher
