// The accrual detector (rendezvous/detector/phi_accrual.h) on hand-fed arrival times: seeded
// simulated links (simulated_link.h) for the two promises of issue 40 (a steady sender on a bad
// link is never suspected; a silent one on a clean link is suspected within 300 ms), then the
// edges: the first heartbeats, equal times, stale ones, a restart, the bounded window, a
// stalled observer.
#include "rendezvous/detector/phi_accrual.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/rendezvous/detector/simulated_link.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using testing::Arrivals;
using testing::BadLink;
using testing::CleanLink;
using testing::FirstSuspicion;
using testing::LinkModel;
using testing::Ms;
using testing::ToDuration;

constexpr milliseconds kTick{5};  // how often the tests' observer looks
const TimePoint kT0{std::chrono::seconds(1000)};

AccrualOptions OptionsFor(Ms interval) {
  AccrualOptions o;
  o.expected_interval = ToDuration(interval);
  return o;
}

// A sender that keeps sending is never suspected on the soak's link: 10 % loss, 50 ms jitter,
// busy cores; 100 seeded links of 60 s each (100 minutes of one link, 300,000 heartbeats).
TEST(PhiAccrualTest, ASteadySenderIsNeverSuspectedUnderTenPercentLossAndFiftyMsJitter) {
  const Ms interval{20};
  testing::Observed seen;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    const std::vector<TimePoint> arrivals = Arrivals(BadLink(interval), kT0, Ms(60'000), rng);
    PhiAccrualDetector detector(OptionsFor(interval));
    const std::optional<TimePoint> suspected =
        FirstSuspicion(detector, arrivals, kT0, kT0 + std::chrono::seconds(60), kTick, 1, &seen);
    ASSERT_FALSE(suspected.has_value())
        << "seed " << seed << ": suspected after " << ToMillis(*suspected - kT0) << " ms";
  }
  std::printf("live link: highest phi %.2f (threshold %.1f), longest silence %lld ms\n",
              seen.max_phi, kDefaultPhiThreshold,
              static_cast<long long>(ToMillis(seen.max_silence)));
}

// A link clean for 10 s (the window's spread is a fraction of a millisecond) that turns into the
// soak's link: the floor on the spread and the pause carry the detector until the window has
// learnt the new link.
TEST(PhiAccrualTest, ALinkThatTurnsBadIsNotSuspectedWhileTheWindowLearnsIt) {
  const Ms interval{20};
  testing::Observed seen;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    std::vector<TimePoint> arrivals = Arrivals(CleanLink(interval), kT0, Ms(10'000), rng);
    const TimePoint turn = kT0 + std::chrono::seconds(10);
    for (TimePoint t : Arrivals(BadLink(interval), turn, Ms(10'000), rng)) arrivals.push_back(t);
    std::sort(arrivals.begin(), arrivals.end());
    PhiAccrualDetector detector(OptionsFor(interval));
    const std::optional<TimePoint> suspected =
        FirstSuspicion(detector, arrivals, kT0, kT0 + std::chrono::seconds(20), kTick, 1, &seen);
    ASSERT_FALSE(suspected.has_value())
        << "seed " << seed << ": suspected " << ToMillis(*suspected - turn) << " ms after the turn";
  }
  std::printf("clean then bad: highest phi %.2f, longest silence %lld ms\n", seen.max_phi,
              static_cast<long long>(ToMillis(seen.max_silence)));
}

// A sender that stops for 150 ms once (a stall of its process, its cores taken) after a clean
// minute, where the intervals varied by well under a millisecond: the floor on the spread keeps
// one late heartbeat from looking like a death.
TEST(PhiAccrualTest, OneSenderStallOf150MsAfterACleanMinuteIsNotSuspected) {
  const Ms interval{20};
  std::mt19937_64 rng(3);
  std::vector<TimePoint> arrivals = Arrivals(CleanLink(interval), kT0, Ms(60'000), rng);
  const TimePoint resume = arrivals.back() + milliseconds(150);
  for (TimePoint t : Arrivals(CleanLink(interval), resume, Ms(1000), rng)) arrivals.push_back(t);
  PhiAccrualDetector detector(OptionsFor(interval));
  testing::Observed seen;
  EXPECT_FALSE(
      FirstSuspicion(detector, arrivals, kT0, resume + std::chrono::seconds(1), kTick, 1, &seen)
          .has_value());
  EXPECT_GE(seen.max_silence, milliseconds(145));
}

// The 99th percentile and the worst of the detection times (from the moment the sender stops)
// over 200 seeded faults after 2 to 10 s of heartbeats.
struct Detection {
  double p99_ms = 0;
  double worst_ms = 0;
  int missed = 0;
};
Detection DetectSilence(const LinkModel& link, Ms bound) {
  std::vector<double> latencies;
  Detection d;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    const Ms sending{std::uniform_real_distribution<double>(2000, 10'000)(rng)};
    const std::vector<TimePoint> arrivals = Arrivals(link, kT0, sending, rng);
    PhiAccrualDetector detector(OptionsFor(link.interval));
    const TimePoint fault = kT0 + ToDuration(sending);
    const std::optional<TimePoint> at =
        FirstSuspicion(detector, arrivals, kT0, fault + ToDuration(bound * 4), milliseconds(1));
    if (!at) {
      ++d.missed;
      continue;
    }
    latencies.push_back(Ms(*at - fault).count());
  }
  std::sort(latencies.begin(), latencies.end());
  if (!latencies.empty()) {
    d.p99_ms = latencies[latencies.size() * 99 / 100];
    d.worst_ms = latencies.back();
  }
  return d;
}

TEST(PhiAccrualTest, ASilentSenderIsSuspectedWithin300MsOnACleanLink) {
  for (Ms interval : {Ms(20), Ms(50)}) {
    const Detection d = DetectSilence(CleanLink(interval), Ms(300));
    std::printf("heartbeat every %.0f ms, clean link: p99 %.1f ms, worst %.1f ms\n",
                interval.count(), d.p99_ms, d.worst_ms);
    EXPECT_EQ(d.missed, 0);
    EXPECT_LE(d.worst_ms, 300) << "heartbeat every " << interval.count() << " ms";
  }
}

// On the soak's link the accrual part waits longer, the window's spread being larger: 360 ms
// worst, still a fortieth of today's 15 s lease.
TEST(PhiAccrualTest, ASilentSenderOnTheSoaksLinkIsSuspectedWithin400Ms) {
  const Detection d = DetectSilence(BadLink(Ms(20)), Ms(400));
  std::printf("heartbeat every 20 ms, 10 %% loss, 50 ms jitter: p99 %.1f ms, worst %.1f ms\n",
              d.p99_ms, d.worst_ms);
  EXPECT_EQ(d.missed, 0);
  EXPECT_LE(d.worst_ms, 400);
}

TEST(PhiAccrualTest, ANodeNeverHeardFromIsNotSuspected) {
  PhiAccrualDetector detector(AccrualOptions{});
  for (TimePoint now = kT0; now < kT0 + std::chrono::seconds(5); now += kTick) {
    EXPECT_FALSE(detector.Evaluate(now).suspected);
  }
  EXPECT_EQ(detector.Phi(kT0 + std::chrono::hours(1)), 0);
  EXPECT_FALSE(detector.SuspectAfter().has_value());
}

// One heartbeat: mean = the expected interval, spread = max(a quarter of it, the floor).
TEST(PhiAccrualTest, OneHeartbeatIsJudgedByTheExpectedInterval) {
  PhiAccrualDetector detector(AccrualOptions{});
  EXPECT_EQ(detector.Heartbeat(kT0, 1), ArrivalKind::kFirst);
  const double z8 = 5.612;  // P(X > z) = 1e-8 for a standard normal
  const double expected_ms = 120 + 20 + z8 * 20;
  ASSERT_TRUE(detector.SuspectAfter().has_value());
  EXPECT_NEAR(Ms(*detector.SuspectAfter()).count(), expected_ms, 0.1);
  EXPECT_FALSE(detector.Evaluate(kT0 + milliseconds(250)).suspected);
  EXPECT_TRUE(detector.Evaluate(kT0 + milliseconds(255)).suspected);
}

TEST(PhiAccrualTest, PhiCrossesTheThresholdExactlyAtSuspectAfter) {
  PhiAccrualDetector detector(AccrualOptions{});
  std::mt19937_64 rng(7);
  const std::vector<TimePoint> arrivals = Arrivals(BadLink(Ms(20)), kT0, Ms(3000), rng);
  for (TimePoint t : arrivals) detector.Heartbeat(t, 1);
  const TimePoint last = arrivals.back();
  const Duration after = *detector.SuspectAfter();
  EXPECT_LT(detector.Phi(last + after - milliseconds(1)), kDefaultPhiThreshold);
  EXPECT_GE(detector.Phi(last + after + std::chrono::microseconds(1)), kDefaultPhiThreshold);
  // And phi only grows with silence.
  double previous = 0;
  for (TimePoint now = last; now < last + std::chrono::seconds(2); now += milliseconds(1)) {
    const double phi = detector.Phi(now);
    EXPECT_GE(phi, previous);
    previous = phi;
  }
  EXPECT_TRUE(std::isinf(previous));
}

TEST(PhiAccrualTest, EqualArrivalTimesAreOneSignOfLifeNotAZeroInterval) {
  PhiAccrualDetector detector(AccrualOptions{});
  for (int i = 0; i < 10; ++i) detector.Heartbeat(kT0 + milliseconds(20 * i), 1);
  const TimePoint last = kT0 + milliseconds(180);
  const Duration before = *detector.SuspectAfter();
  for (int i = 0; i < 50; ++i) EXPECT_EQ(detector.Heartbeat(last, 1), ArrivalKind::kDuplicate);
  EXPECT_EQ(detector.samples(), 9u);
  EXPECT_DOUBLE_EQ(detector.mean_ms(), 20);
  EXPECT_EQ(*detector.SuspectAfter(), before);
}

TEST(PhiAccrualTest, AnEarlierArrivalOrAnOlderIncarnationIsStale) {
  PhiAccrualDetector detector(AccrualOptions{});
  detector.Heartbeat(kT0, 2);
  detector.Heartbeat(kT0 + milliseconds(20), 2);
  EXPECT_EQ(detector.Heartbeat(kT0 + milliseconds(10), 2), ArrivalKind::kStale);
  EXPECT_EQ(detector.Heartbeat(kT0 + milliseconds(40), 1), ArrivalKind::kStale);
  EXPECT_EQ(detector.samples(), 1u);
  // The stale ones renewed nothing: silence still counts from 20 ms.
  EXPECT_EQ(detector.Evaluate(kT0 + milliseconds(60)).silence, milliseconds(40));
}

// A sender that restarts (a new agent, incarnation 2) after 3 s away and then falls silent is
// found as fast as a fresh one: the 3 s of the restart is no interval of a live sender.
TEST(PhiAccrualTest, ARestartedSenderStartsAFreshWindow) {
  PhiAccrualDetector detector(AccrualOptions{});
  TimePoint t = kT0;
  for (int i = 0; i < 50; ++i, t += milliseconds(20)) detector.Heartbeat(t, 1);
  t += std::chrono::seconds(3);
  EXPECT_EQ(detector.Heartbeat(t, 2), ArrivalKind::kRestarted);
  EXPECT_EQ(detector.samples(), 0u);
  for (int i = 1; i <= 15; ++i) detector.Heartbeat(t + milliseconds(20 * i), 2);
  const TimePoint last = t + milliseconds(300);
  std::optional<TimePoint> at;
  for (TimePoint now = last; now < last + std::chrono::seconds(2) && !at; now += kTick) {
    if (detector.Evaluate(now).suspected) at = now;
  }
  ASSERT_TRUE(at.has_value());
  EXPECT_LE(*at - last, milliseconds(300));
}

TEST(PhiAccrualTest, TheWindowForgetsItsOldestIntervals) {
  AccrualOptions options;
  options.window_size = 200;
  PhiAccrualDetector detector(options);
  TimePoint t = kT0;
  detector.Heartbeat(t, 1);
  for (int i = 0; i < 200; ++i) detector.Heartbeat(t += milliseconds(20), 1);
  EXPECT_DOUBLE_EQ(detector.mean_ms(), 20);
  for (int i = 0; i < 200; ++i) detector.Heartbeat(t += milliseconds(40), 1);
  EXPECT_EQ(detector.samples(), 200u);
  EXPECT_DOUBLE_EQ(detector.mean_ms(), 40);
  EXPECT_DOUBLE_EQ(detector.std_dev_ms(), 0);
}

// The observer itself did not run for 1 s (SIGSTOP, starved cores): on waking it has no
// evidence about the sender yet, and measures the silence from then.
TEST(PhiAccrualTest, AStalledObserverDoesNotSuspectOnWaking) {
  PhiAccrualDetector detector(AccrualOptions{});
  TimePoint t = kT0;
  for (int i = 0; i < 100; ++i, t += milliseconds(20)) {
    detector.Heartbeat(t, 1);
    detector.Evaluate(t);
  }
  const TimePoint wake = t + std::chrono::seconds(1);
  EXPECT_FALSE(detector.Evaluate(wake).suspected);
  std::optional<TimePoint> at;
  for (TimePoint now = wake + kTick; now < wake + std::chrono::seconds(1) && !at; now += kTick) {
    if (detector.Evaluate(now).suspected) at = now;
  }
  ASSERT_TRUE(at.has_value());
  EXPECT_LE(*at - wake, *detector.SuspectAfter() + kTick);
}

TEST(PhiAccrualTest, PhiOfTheStandardNormal) {
  EXPECT_NEAR(PhiOfStandardNormal(0), std::log10(2.0), 1e-12);
  EXPECT_NEAR(PhiOfStandardNormal(5.612), 8.0, 0.01);
  EXPECT_TRUE(std::isinf(PhiOfStandardNormal(50)));
  EXPECT_NEAR(PhiOfStandardNormal(-50), 0, 1e-12);
}

TEST(PhiAccrualTest, BadOptionsAreRefusedNamingTheField) {
  EXPECT_TRUE(ValidateAccrualOptions(AccrualOptions{}).ok());
  auto refused = [](void (*edit)(AccrualOptions&), const char* field) {
    AccrualOptions o;
    edit(o);
    const absl::Status s = ValidateAccrualOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), absl::string_view::npos) << s;
  };
  refused([](AccrualOptions& o) { o.expected_interval = Duration::zero(); }, "expected_interval");
  refused([](AccrualOptions& o) { o.phi_threshold = 0; }, "phi_threshold");
  refused([](AccrualOptions& o) { o.phi_threshold = NAN; }, "phi_threshold");
  refused([](AccrualOptions& o) { o.window_size = 1; }, "window_size");
  refused([](AccrualOptions& o) { o.window_size = kMaxWindowSize + 1; }, "window_size");
  refused([](AccrualOptions& o) { o.min_std_deviation = Duration::zero(); }, "min_std_deviation");
  refused([](AccrualOptions& o) { o.acceptable_pause = milliseconds(-1); }, "acceptable_pause");
  refused([](AccrualOptions& o) { o.max_evaluation_gap = Duration::zero(); }, "max_evaluation_gap");
}

}  // namespace
}  // namespace ddprun::rendezvous
