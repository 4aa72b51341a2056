#include "launcher/config/host_info.h"

#include <gtest/gtest.h>

#include "tests/testing/test_env.h"

namespace ddprun::launcher {
namespace {

TEST(HostInfoTest, CudaVisibleDevicesWins) {
  testing::TempDir dev;
  testing::WriteFile(dev.File("nvidia0"), "");
  EXPECT_EQ(CountVisibleGpus({{"CUDA_VISIBLE_DEVICES", "0,1,3"}}, dev.path()), 3);
  EXPECT_EQ(CountVisibleGpus({{"CUDA_VISIBLE_DEVICES", "GPU-abc,GPU-def"}}, dev.path()), 2);
  EXPECT_EQ(CountVisibleGpus({{"CUDA_VISIBLE_DEVICES", ""}}, dev.path()), 0);
  EXPECT_EQ(CountVisibleGpus({{"CUDA_VISIBLE_DEVICES", "-1"}}, dev.path()), 0);
  EXPECT_EQ(CountVisibleGpus({{"CUDA_VISIBLE_DEVICES", "0,-1,2"}}, dev.path()), 1);
}

TEST(HostInfoTest, DeviceNodesCountedWithoutCuda) {
  testing::TempDir dev;
  for (const char* name : {"nvidia0", "nvidia1", "nvidia7", "nvidiactl", "nvidia-uvm", "null"}) {
    testing::WriteFile(dev.File(name), "");
  }
  EXPECT_EQ(CountVisibleGpus({}, dev.path()), 3);
  EXPECT_EQ(CountVisibleGpus({}, dev.File("missing")), 0);
}

}  // namespace
}  // namespace ddprun::launcher
