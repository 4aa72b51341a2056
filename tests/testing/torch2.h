// The torch 2.11 venv of the torch 2.x tests (scripts/install-torch2.sh makes it): where it is,
// and whether a test may use it. A test that needs it:
//
//   const testing::Torch2& t2 = testing::FindTorch2();
//   if (!t2.opted_out.empty()) GTEST_SKIP() << t2.opted_out;
//   ASSERT_TRUE(t2.error.empty()) << t2.error;
//
// Missing or wrong is a failure, never a silent skip; only DDPRUN_NO_TORCH2=1 skips, saying so.
#ifndef DDPRUN_TESTS_TESTING_TORCH2_H_
#define DDPRUN_TESTS_TESTING_TORCH2_H_

#include <string>

namespace ddprun::testing {

inline constexpr char kTorch2Version[] = "2.11.0";

struct Torch2 {
  std::string venv;       // $DDPRUN_TORCH2_VENV, else ~/.cache/ddprun/venv-torch-2.11.0
  std::string python;     // venv/bin/python
  std::string torchrun;   // venv/bin/torchrun
  std::string opted_out;  // non-empty: DDPRUN_NO_TORCH2=1, the reason to print with the skip
  std::string error;      // non-empty: missing or the wrong torch, one line saying what to do
};

// Checked once per process (it imports torch once: about 1.5 s).
const Torch2& FindTorch2();

// The check above as one statement: declares `t2`, skips or fails the test as described.
#define DDPRUN_REQUIRE_TORCH2()                                          \
  const ::ddprun::testing::Torch2& t2 = ::ddprun::testing::FindTorch2(); \
  if (!t2.opted_out.empty()) GTEST_SKIP() << t2.opted_out;               \
  ASSERT_TRUE(t2.error.empty()) << t2.error

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_TORCH2_H_
