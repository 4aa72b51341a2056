#include "launcher/config/numa_binding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/fake_sysfs.h"
#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

using ::testing::HasSubstr;

std::set<int> Cpus(const std::string& list) { return ParseCpuList(list).value(); }

std::set<int> AllOf(const testing::FakeMachine& m) {
  std::set<int> all;
  for (const auto& node : m.nodes) {
    for (int core : node.cores) {
      all.insert(core);
      if (node.smt_offset > 0) all.insert(core + node.smt_offset);
    }
  }
  return all;
}

class NumaBindingTest : public ::testing::Test {
 protected:
  NumaTopology Load(const testing::FakeMachine& machine) {
    WriteFakeSysfs(dir_.path(), machine);
    auto t = NumaTopology::Read(dir_.path());
    EXPECT_TRUE(t.ok()) << t.status();
    return *std::move(t);
  }
  // The CPUs of `gpu` as a sysfs list ("0-3,8"), or the error's message.
  static std::string For(const NumaTopology& t, int gpu, NumaMode mode, std::set<int> allowed) {
    auto cpus = t.CpusFor(gpu, mode, allowed);
    return cpus.ok() ? FormatCpuList(*cpus) : std::string(cpus.status().message());
  }
  testing::TempDir dir_;
};

TEST(CpuListTest, ParsesAndFormatsTheSysfsListFormat) {
  EXPECT_EQ(Cpus("0-3,8,10-11\n"), (std::set<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(Cpus(""), std::set<int>{});
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("a").ok());
  EXPECT_FALSE(ParseCpuList("1-").ok());
}

TEST(CpuListTest, ModesAreTorchsFourNames) {
  EXPECT_EQ(ParseNumaMode("node").value(), NumaMode::kNode);
  EXPECT_EQ(ParseNumaMode("socket").value(), NumaMode::kSocket);
  EXPECT_EQ(ParseNumaMode("exclusive").value(), NumaMode::kExclusive);
  EXPECT_EQ(ParseNumaMode("core-complex").value(), NumaMode::kCoreComplex);
  EXPECT_FALSE(ParseNumaMode("core_complex").ok());
  EXPECT_FALSE(ParseNumaMode("").ok());
}

TEST(CpuListTest, GpuOfEachLocalRankFollowsCudaVisibleDevices) {
  EXPECT_EQ(GpuIndexOfLocalRanks("", 3).value(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(GpuIndexOfLocalRanks("6,2,7", 2).value(), (std::vector<int>{6, 2}));
  auto uuid = GpuIndexOfLocalRanks("GPU-5f2c,GPU-77aa", 2);
  ASSERT_FALSE(uuid.ok());
  EXPECT_THAT(std::string(uuid.status().message()), HasSubstr("CUDA_VISIBLE_DEVICES=GPU-5f2c"));
  auto few = GpuIndexOfLocalRanks("0", 2);
  ASSERT_FALSE(few.ok());
  EXPECT_THAT(std::string(few.status().message()), HasSubstr("lists 1 GPU(s) for 2 workers"));
}

TEST_F(NumaBindingTest, IntelTwoSocketsEightGpus) {
  const testing::FakeMachine m = testing::TwoSocketEightGpuIntel();
  const NumaTopology t = Load(m);
  ASSERT_EQ(t.gpu_count(), 8) << "the NIC is not a GPU";
  EXPECT_EQ(t.gpu_addresses()[0], "0000:18:00.0");
  const std::set<int> all = AllOf(m);
  EXPECT_EQ(For(t, 0, NumaMode::kNode, all), "0-55,112-167");
  EXPECT_EQ(For(t, 4, NumaMode::kNode, all), "56-111,168-223");
  EXPECT_EQ(For(t, 7, NumaMode::kSocket, all), "56-111,168-223") << "one node per socket";
  // 56 cores shared by 4 GPUs: 14 whole cores each, with their hyper-threads.
  EXPECT_EQ(For(t, 0, NumaMode::kExclusive, all), "0-13,112-125");
  EXPECT_EQ(For(t, 3, NumaMode::kExclusive, all), "42-55,154-167");
  EXPECT_EQ(For(t, 5, NumaMode::kExclusive, all), "70-83,182-195");
  EXPECT_EQ(For(t, 1, NumaMode::kCoreComplex, all), "0-55,112-167") << "one L3 per socket";
  // Within ddprun's own affinity (taskset, a cgroup, Slurm).
  EXPECT_EQ(For(t, 0, NumaMode::kNode, Cpus("0-7,200-203")), "0-7");
  EXPECT_THAT(For(t, 4, NumaMode::kNode, Cpus("0-7")),
              HasSubstr("GPU 4 (0000:9a:00.0) is on NUMA node 1, none of whose CPUs"));
  EXPECT_THAT(For(t, 0, NumaMode::kExclusive, Cpus("0-2,112")),
              HasSubstr("3 physical core(s) for 4 GPUs"));
  EXPECT_THAT(For(t, 8, NumaMode::kNode, all), HasSubstr("GPU 8 is not on this machine"));
}

TEST_F(NumaBindingTest, AmdTwoSocketsFourNodesEightGpus) {
  const testing::FakeMachine m = testing::TwoSocketEightGpuAmd();
  const NumaTopology t = Load(m);
  ASSERT_EQ(t.gpu_count(), 8);
  EXPECT_EQ(t.gpu_addresses()[0], "0000:01:00.0") << "PCI order, not the order listed";
  EXPECT_EQ(t.gpu_addresses()[7], "0000:e1:00.0");
  const std::set<int> all = AllOf(m);
  EXPECT_EQ(For(t, 2, NumaMode::kNode, all), "16-31,80-95");
  // socket: both NUMA nodes of the GPU's socket.
  EXPECT_EQ(For(t, 2, NumaMode::kSocket, all), "0-31,64-95");
  EXPECT_EQ(For(t, 7, NumaMode::kSocket, all), "32-63,96-127");
  EXPECT_EQ(For(t, 0, NumaMode::kExclusive, all), "0-7,64-71");
  EXPECT_EQ(For(t, 1, NumaMode::kExclusive, all), "8-15,72-79");
  EXPECT_EQ(For(t, 0, NumaMode::kCoreComplex, all), "0-7,64-71");
  EXPECT_EQ(For(t, 1, NumaMode::kCoreComplex, all), "8-15,72-79");
  EXPECT_EQ(For(t, 6, NumaMode::kCoreComplex, all), "48-55,112-119");
  // 15 usable cores for 2 GPUs: the lower GPU takes the extra one.
  std::set<int> no_core_15 = all;
  no_core_15.erase(15);
  no_core_15.erase(79);
  EXPECT_EQ(For(t, 0, NumaMode::kExclusive, no_core_15), "0-7,64-71");
  EXPECT_EQ(For(t, 1, NumaMode::kExclusive, no_core_15), "8-14,72-78");
  // The fuller core complex first.
  std::set<int> no_cores_0_to_3 = all;
  for (int cpu : {0, 1, 2, 3, 64, 65, 66, 67}) no_cores_0_to_3.erase(cpu);
  EXPECT_EQ(For(t, 0, NumaMode::kCoreComplex, no_cores_0_to_3), "8-15,72-79");
  EXPECT_EQ(For(t, 1, NumaMode::kCoreComplex, no_cores_0_to_3), "4-7,68-71");
}

TEST_F(NumaBindingTest, AGpuWithoutANumaNodeBelongsToNodeZero) {
  testing::FakeMachine m;
  testing::FakeMachine::Node node;
  node.cores = {0, 1, 2, 3};
  m.nodes = {node};
  m.gpus = {{"0000:65:00.0", -1}};
  const NumaTopology t = Load(m);
  EXPECT_EQ(For(t, 0, NumaMode::kNode, Cpus("0-3")), "0-3");
}

// This machine's own /sys: it reads, and either places GPU 0 within ddprun's CPUs or says
// plainly that there is no GPU 0.
TEST(NumaBindingThisMachineTest, RealSysfsReads) {
  auto t = NumaTopology::Read("/sys");
  ASSERT_TRUE(t.ok()) << t.status();
  const std::set<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  auto cpus = t->CpusFor(0, NumaMode::kNode, allowed);
  if (t->gpu_count() == 0) {
    ASSERT_FALSE(cpus.ok());
    EXPECT_THAT(std::string(cpus.status().message()), HasSubstr("GPU 0 is not on this machine"));
  } else {
    ASSERT_TRUE(cpus.ok()) << cpus.status();
    for (int cpu : *cpus) EXPECT_TRUE(allowed.count(cpu)) << cpu;
  }
}

}  // namespace
}  // namespace ddprun::launcher
