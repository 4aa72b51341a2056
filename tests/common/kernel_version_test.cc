#include "common/kernel_version.h"

#include "gtest/gtest.h"

namespace ddprun {
namespace {

TEST(KernelVersionTest, ComparesTheFirstTwoFieldsOfAReleaseString) {
  EXPECT_TRUE(KernelAtLeast("3.10.0-1160.el7.x86_64", 3, 10));
  EXPECT_TRUE(KernelAtLeast("6.1.0-18-amd64", 3, 10));
  EXPECT_TRUE(KernelAtLeast("4.0", 3, 10));
  EXPECT_TRUE(KernelAtLeast("5.15rc2", 5, 15));
  EXPECT_FALSE(KernelAtLeast("3.9.11", 3, 10));
  EXPECT_FALSE(KernelAtLeast("2.6.78-fc-v657", 3, 10));  // setarch --uname-2.6
  EXPECT_FALSE(KernelAtLeast("3.2", 3, 10));
}

TEST(KernelVersionTest, AnOddReleaseStringIsNotRefused) {
  EXPECT_TRUE(KernelAtLeast("", 3, 10));
  EXPECT_TRUE(KernelAtLeast("unknown", 3, 10));
  EXPECT_TRUE(KernelAtLeast("3", 3, 10));
  EXPECT_TRUE(KernelAtLeast("x.y.z", 3, 10));
}

}  // namespace
}  // namespace ddprun
