// The order of the option sources (precedence.h), as a pure function: applied in the order it
// returns, the strongest source's value is the last one and wins.
#include "launcher/config/precedence.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Wheres(const std::vector<FlagValue>& values) {
  std::vector<std::string> out;
  for (const FlagValue& v : values) out.push_back(v.where);
  return out;
}

TEST(PrecedenceTest, JobEnvironmentThenVariablesThenYamlThenCommandLine) {
  FlagSources s;
  s.command_line = {{"nnodes", "4", "--nnodes"}};
  s.yaml = {{"nnodes", "3", "job.yaml:1: nnodes"}};
  s.environment = {{"nnodes", "2", "PET_NNODES"}};
  s.job = {{"nnodes", "1", "SLURM_STEP_NUM_NODES"}};
  EXPECT_THAT(Wheres(InPrecedenceOrder(s)),
              ElementsAre("SLURM_STEP_NUM_NODES", "PET_NNODES", "job.yaml:1: nnodes", "--nnodes"));
  // What the planners of a job's environment must not override: the user's, not their own.
  EXPECT_THAT(Wheres(ExplicitValues(s)),
              ElementsAre("PET_NNODES", "job.yaml:1: nnodes", "--nnodes"));
}

TEST(PrecedenceTest, TorchVariablesAreWeakerThanPetVariables) {
  const std::vector<FlagValue> values = EnvironmentValues({{"PET_SHUTDOWN_TIMEOUT", "5"},
                                                           {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "9"},
                                                           {"PET_NNODES", "2"},
                                                           {"NNODES", "7"}});
  EXPECT_THAT(Wheres(values),
              ElementsAre("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "PET_NNODES", "PET_SHUTDOWN_TIMEOUT"));
  EXPECT_EQ(values.front().flag, "shutdown-timeout");
}

TEST(PrecedenceTest, AConfigFileGivesFlagsAndTheEntrypoint) {
  std::vector<ConfigValue> values(3);
  values[0].key = "nnodes";
  values[0].value = "2";
  values[0].line = 1;
  values[1].key = "script";
  values[1].value = "train.py";
  values[1].line = 2;
  values[2].key = "script-args";
  values[2].list = {"--epochs", "2"};
  values[2].shape = ConfigValue::Shape::kList;
  values[2].line = 3;
  auto file = FromConfigFile("job.yaml", values);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(Wheres(file->flags), ElementsAre("job.yaml:1: nnodes"));
  EXPECT_EQ(file->entrypoint, "train.py");
  EXPECT_THAT(file->entrypoint_args, ElementsAre("--epochs", "2"));

  values[0].key = "nodes";
  auto bad = FromConfigFile("job.yaml", values);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("job.yaml:1: unknown key 'nodes'"));
}

}  // namespace
}  // namespace ddprun::launcher
