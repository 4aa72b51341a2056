// TimerTable and ParseTimerRequest: torch's FileTimer protocol as the agent serves it.
#include "launcher/hangs/timer_table.h"

#include <gtest/gtest.h>

namespace ddprun::launcher {
namespace {

TimerRequest Acquire(int pid, const std::string& scope, double expiration, int signal = 9) {
  return TimerRequest{pid, scope, expiration, signal};
}
TimerRequest Release(int pid, const std::string& scope) { return TimerRequest{pid, scope, -1, 0}; }

TEST(ParseTimerRequestTest, ReadsWhatTorchsFileTimerClientWrites) {
  // FileTimerRequest.to_json() of torch 1.13, byte for byte.
  auto r = ParseTimerRequest(
      R"({"version": 1, "pid": 4242, "scope_id": "train.py#57", "expiration_time": 1700000002.5, "signal": 9})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pid, 4242);
  EXPECT_EQ(r->scope_id, "train.py#57");
  EXPECT_DOUBLE_EQ(r->expiration_time, 1700000002.5);
  EXPECT_EQ(r->signal, 9);
  EXPECT_FALSE(r->is_release());
  auto release = ParseTimerRequest(
      R"({"version": 1, "pid": 4242, "scope_id": "train.py#57", "expiration_time": -1, "signal": 0})");
  ASSERT_TRUE(release.ok());
  EXPECT_TRUE(release->is_release());
}

TEST(ParseTimerRequestTest, RejectsGarbageWithAReason) {
  for (const char* line : {"", "garbage", "[1,2]", "{\"pid\": 1}",
                           R"({"pid": "1", "scope_id": "a", "expiration_time": 1, "signal": 9})",
                           R"({"pid": -5, "scope_id": "a", "expiration_time": 1, "signal": 9})",
                           R"({"pid": 99999999, "scope_id": "a", "expiration_time": 1})",
                           R"({"pid": 5, "scope_id": 7, "expiration_time": 1, "signal": 9})",
                           R"({"pid": 5, "scope_id": "a", "expiration_time": "x", "signal": 9})",
                           R"({"pid": 5, "scope_id": "a", "expiration_time": 1, "signal": 999})",
                           R"({"version": 2, "pid": 5, "scope_id": "a", "expiration_time": 1})",
                           R"({"pid": 5, "scope_id": "a", "expiration_time": 1)"}) {
    auto r = ParseTimerRequest(line);
    EXPECT_FALSE(r.ok()) << line;
    if (!r.ok()) {
      EXPECT_FALSE(r.status().message().empty()) << line;
    }
  }
}

TEST(TimerTableTest, AcquireExpireAndReleaseAsTorchDoes) {
  TimerTable t;
  EXPECT_TRUE(t.Apply(Acquire(10, "a", 100.0)));
  EXPECT_TRUE(t.Apply(Acquire(10, "b", 105.0)));
  EXPECT_TRUE(t.Apply(Acquire(20, "a", 102.0)));
  EXPECT_TRUE(t.TakeExpired(99.9).empty());
  EXPECT_EQ(t.NextExpiry(), 100.0);
  EXPECT_TRUE(t.Apply(Release(20, "a")));
  auto expired = t.TakeExpired(103.0);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].pid, 10);
  EXPECT_EQ(expired[0].scope_id, "a");
  EXPECT_EQ(expired[0].signal, 9);
  // A reaped pid's other timers go with it, as in torch's clear_timers.
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.NextExpiry().has_value());
  EXPECT_TRUE(t.TakeExpired(1e12).empty());
}

TEST(TimerTableTest, EarliestExpiryFirstAcrossPidsAndReacquireMovesTheDeadline) {
  TimerTable t;
  t.Apply(Acquire(1, "s", 50.0));
  t.Apply(Acquire(2, "s", 40.0));
  t.Apply(Acquire(3, "s", 45.0));
  t.Apply(Acquire(3, "s", 500.0));  // the same scope again: a new deadline, not a second timer
  auto expired = t.TakeExpired(60.0);
  ASSERT_EQ(expired.size(), 2u);
  EXPECT_EQ(expired[0].pid, 2);
  EXPECT_EQ(expired[1].pid, 1);
  EXPECT_EQ(t.Pids(), std::vector<int>{3});
}

TEST(TimerTableTest, ScopesAskingForNoSignalAreDroppedWithoutAction) {
  TimerTable t;
  t.Apply(Acquire(7, "quiet", 10.0, /*signal=*/0));
  t.Apply(Acquire(8, "loud", 12.0, /*signal=*/0));
  t.Apply(Acquire(8, "louder", 11.0, /*signal=*/15));
  auto expired = t.TakeExpired(20.0);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].pid, 8);
  EXPECT_EQ(expired[0].scope_id, "louder");
  EXPECT_EQ(expired[0].signal, 15);
  EXPECT_EQ(t.size(), 0u);
}

TEST(TimerTableTest, DeadPidsAreDroppedAndReleasingUnknownScopesIsHarmless) {
  TimerTable t;
  t.Apply(Release(5, "never acquired"));
  t.Apply(Acquire(5, "a", 10.0));
  t.Apply(Acquire(6, "a", 10.0));
  t.DropPid(5);
  EXPECT_EQ(t.Pids(), std::vector<int>{6});
}

TEST(TimerTableTest, AFloodingPidIsCapped) {
  TimerTable t;
  for (size_t i = 0; i < TimerTable::kMaxScopesPerPid; ++i) {
    ASSERT_TRUE(t.Apply(Acquire(9, "s" + std::to_string(i), 1e9)));
  }
  EXPECT_FALSE(t.Apply(Acquire(9, "one too many", 1e9)));
  EXPECT_TRUE(t.Apply(Acquire(9, "s0", 2e9)));  // renewing a held scope still works
  EXPECT_TRUE(t.Apply(Acquire(10, "other pid", 1e9)));
  t.Apply(Release(9, "s1"));
  EXPECT_TRUE(t.Apply(Acquire(9, "room again", 1e9)));
}

}  // namespace
}  // namespace ddprun::launcher
