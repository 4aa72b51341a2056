// LastRoundMajority: the rule that keeps a partitioned job from running two worlds when its
// rendezvous server lives in an agent (the embedded server, which fails over).
//
// Without a server outside the job, an agent that hears nothing from the agent hosting the
// server cannot tell "that host is gone" from "I am cut off". Both sides of a partition may
// then serve the run: the old host for its side, a successor for the other. Each may form a
// new round only with a majority of the last round's members: more than half of those not
// known to be gone, or exactly half when the lowest group rank among them is present (so that
// a job of two nodes, or any even split, has one side that goes on). Two disjoint sides cannot
// both hold that, so at most one world runs.
//
// "Known to be gone" is what makes the rule cost nothing where there is no doubt: a member
// whose agent left, or whose stream this server saw break while the member was still heard
// from (its agent died, its host is up), cannot be on the other side of a partition, so it is
// not counted. Members lost to silence (their lease expired) are: they may be alive elsewhere.
// A server that recovers a run from its agents' claims (a successor) knows the round's size and
// the ranks a claim names as gone (the host whose address refused connections).
//
// Pure, no I/O; owned by RunState.
#ifndef DDPRUN_RENDEZVOUS_CORE_LAST_ROUND_MAJORITY_H_
#define DDPRUN_RENDEZVOUS_CORE_LAST_ROUND_MAJORITY_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace ddprun::rendezvous {

class LastRoundMajority {
 public:
  // Whether `node_id` (a member of the last round) is connected to this server.
  using IsPresent = std::function<bool(const std::string& node_id)>;

  // A round formed or was recovered: its members by group rank ("" for a rank whose node this
  // server never saw, e.g. the lost host of a recovered round), and the ranks known gone.
  void Reset(std::vector<std::string> members_by_rank, std::set<int> gone_ranks = {});
  // The member left cleanly or died where this server saw it: it no longer counts.
  void MarkGone(const std::string& node_id);

  // Whether the present members make a majority (see above). True when no round is known or
  // every member is known gone: there is nobody a new round could be split from.
  bool HeldBy(const IsPresent& present) const;
  // "1 of the 3 members of round 4 that may still be alive (node a; node b, node c are
  // silent)" — for the log line and the close message when the majority never comes back.
  std::string Describe(const IsPresent& present, int64_t round) const;

  bool empty() const { return members_.empty(); }

 private:
  std::vector<std::string> members_;  // by group rank
  std::set<int> gone_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_LAST_ROUND_MAJORITY_H_
