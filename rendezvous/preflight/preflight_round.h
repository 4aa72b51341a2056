// One preflight of a run (issue 41, docs/design.md §3d): who takes part, whom each probes, which
// reports are in, and when the server stops waiting. Every participant probes the next two that
// listen, in a ring, one after the other: each node takes part in four pairs (two it starts, two
// it answers), so the whole job is measured in two probes per node, all nodes at once, whatever
// its size. Four pairs, not two: a node is judged by its best pair, and one probe of 200 ms on a
// busy host can come out a third short (measured on loopback: 0.69x the median, a healthy node).
//
// Pure: no I/O, no clock reads. Not thread-safe (one per run, on the server's loop).
#ifndef DDPRUN_RENDEZVOUS_PREFLIGHT_PREFLIGHT_ROUND_H_
#define DDPRUN_RENDEZVOUS_PREFLIGHT_PREFLIGHT_ROUND_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "rendezvous/api/preflight.h"
#include "rendezvous/preflight/preflight_judge.h"

namespace ddprun::rendezvous {

// A node that takes part: where its probe listener is (port 0: it listens nowhere, so it
// probes but is not probed).
struct PreflightParticipant {
  std::string node_id;
  std::string hostname;
  std::string addr;
  int port = 0;
};

class PreflightRound {
 public:
  static constexpr size_t kTargetsPerNode = 2;

  // `generation` tells this preflight's reports from an earlier one's.
  PreflightRound(int64_t generation, std::vector<PreflightParticipant> participants,
                 const PreflightSettings& settings, TimePoint now);

  // Every participant's request, by node id: the next participant in the ring that listens.
  std::vector<std::pair<std::string, PreflightRequest>> Requests() const;
  // A node that joined while the preflight runs (a spare arriving with the members): it takes
  // part too, probing the first kTargetsPerNode listeners of the ring (nobody probes it: its own
  // pairs judge it). Its request.
  PreflightRequest Add(const PreflightParticipant& participant);
  // Takes `node_id`'s report; false (ignored) for a node that does not take part, a report of
  // another generation, or a second report.
  bool Report(const std::string& node_id, const PreflightReport& report);
  // The node left the run: nothing more is awaited from it, and it is not judged.
  void Forget(const std::string& node_id);
  // Every participant still in the run reported.
  bool Complete() const;
  TimePoint deadline() const { return deadline_; }
  TimePoint started() const { return started_; }
  // The verdicts on the participants still in the run (one that did not report is named so).
  std::vector<PreflightVerdict> Judge() const;
  // The job's median node as Judge() measures against.
  PreflightFigures Median() const;

 private:
  std::vector<PreflightEntry> Entries() const;

  const int64_t generation_;
  std::vector<PreflightParticipant> participants_;  // the ring's, then those Add()ed
  const PreflightSettings settings_;
  const TimePoint started_;
  const TimePoint deadline_;
  size_t ring_size_ = 0;  // participants_ at the start: the ring
  std::map<std::string, std::optional<PreflightReport>> reports_;  // the ones still in the run
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_PREFLIGHT_PREFLIGHT_ROUND_H_
