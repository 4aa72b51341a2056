// A seeded model of one heartbeat link for the detector's tests, as `tc netem loss L delay D J`
// shapes it: the sender sends every `interval` (late by up to `send_lag` when its cores are busy,
// never drifting: each send is scheduled from the start), each packet is lost with probability
// `loss`, and delivered after `delay` plus a uniform jitter in [-jitter, +jitter] (never before
// it was sent). Arrivals are returned sorted, as a socket hands them over (jitter reorders).
#ifndef DDPRUN_TESTS_RENDEZVOUS_DETECTOR_SIMULATED_LINK_H_
#define DDPRUN_TESTS_RENDEZVOUS_DETECTOR_SIMULATED_LINK_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "common/clock.h"
#include "rendezvous/detector/phi_accrual.h"

namespace ddprun::rendezvous::testing {

using Ms = std::chrono::duration<double, std::milli>;

struct LinkModel {
  Ms interval{20};
  double loss = 0;
  Ms delay{0};
  Ms jitter{0};
  Ms send_lag{0};
};

// The clean link of the 300 ms target: loopback or one switch, a little scheduling noise.
inline LinkModel CleanLink(Ms interval) { return LinkModel{interval, 0, Ms(0.2), Ms(0.1), Ms(1)}; }
// The soak's link (issue 40): 10 % loss, 50 ms jitter around 50 ms, both cores busy.
inline LinkModel BadLink(Ms interval) { return LinkModel{interval, 0.10, Ms(50), Ms(50), Ms(5)}; }

inline Duration ToDuration(Ms ms) { return std::chrono::duration_cast<Duration>(ms); }

// Arrival times of the heartbeats sent in [start, start + sending), sorted.
inline std::vector<TimePoint> Arrivals(const LinkModel& link, TimePoint start, Ms sending,
                                       std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<TimePoint> out;
  for (Ms at{0}; at < sending; at += link.interval) {
    const Ms sent = at + link.send_lag * unit(rng);
    if (unit(rng) < link.loss) continue;
    const Ms noise = link.jitter * (2 * unit(rng) - 1);
    const Ms arrives = sent + std::max(Ms(0), link.delay + noise);
    out.push_back(start + ToDuration(arrives));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The most a live link's observer saw: its highest phi and its longest silence.
struct Observed {
  double max_phi = 0;
  Duration max_silence{};
};

// Feeds `arrivals` (sorted) to `detector`, evaluating every `tick` from `from` until `until`;
// the first time it suspects, or nullopt.
inline std::optional<TimePoint> FirstSuspicion(PhiAccrualDetector& detector,
                                               const std::vector<TimePoint>& arrivals,
                                               TimePoint from, TimePoint until, Duration tick,
                                               uint64_t incarnation = 1, Observed* seen = nullptr) {
  size_t next = 0;
  for (TimePoint now = from; now <= until; now += tick) {
    while (next < arrivals.size() && arrivals[next] <= now) {
      detector.Heartbeat(arrivals[next++], incarnation);
    }
    const Suspicion s = detector.Evaluate(now);
    if (seen != nullptr) {
      seen->max_phi = std::max(seen->max_phi, s.phi);
      seen->max_silence = std::max(seen->max_silence, s.silence);
    }
    if (s.suspected) return now;
  }
  return std::nullopt;
}

}  // namespace ddprun::rendezvous::testing

#endif  // DDPRUN_TESTS_RENDEZVOUS_DETECTOR_SIMULATED_LINK_H_
