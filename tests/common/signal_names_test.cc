#include "common/signal_names.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ddprun {
namespace {

TEST(SignalNamesTest, NameOfNumber) {
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(77), "signal 77");
  EXPECT_EQ(SignalName(0), "signal 0");
  EXPECT_EQ(SignalNameAndNumber(SIGKILL), "SIGKILL (9)");
}

TEST(SignalNamesTest, NumberOfName) {
  EXPECT_EQ(SignalFromName("SIGKILL"), SIGKILL);
  EXPECT_EQ(SignalFromName("term"), SIGTERM);
  EXPECT_EQ(SignalFromName(" SIGUSR1 "), SIGUSR1);
  EXPECT_EQ(SignalFromName("15"), 15);
  EXPECT_EQ(SignalFromName("SIGWHAT"), 0);
  EXPECT_EQ(SignalFromName(""), 0);
  EXPECT_EQ(SignalFromName("0"), 0);
  EXPECT_EQ(SignalFromName("-9"), 0);
  EXPECT_EQ(SignalFromName(absl::StrCat(NSIG)), 0);
}

TEST(SignalNamesTest, RoundTrip) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSEGV, SIGCHLD}) {
    EXPECT_EQ(SignalFromName(SignalName(sig)), sig) << sig;
  }
}

}  // namespace
}  // namespace ddprun
