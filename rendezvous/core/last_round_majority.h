// LastRoundMajority: the rule that keeps a partitioned job from running two worlds when its
// rendezvous server lives in an agent (the embedded server, which fails over).
//
// Without a server outside the job, an agent that hears nothing from the agent hosting the
// server cannot tell "that host is gone" from "I am cut off". Both sides of a partition may
// then serve the run: the old host for its side, a successor for the other. Each may form a
// new round only with a majority of the last round's members: more than half of those not
// known to be gone, or exactly half when the lowest group rank among them is present (so that
// a job of two nodes, or any even split, has one side that goes on). Two disjoint sides cannot
// both hold that of the same round, so at most one world runs.
//
// "The same round" is what joint consensus (as in Raft's membership changes) keeps true. A
// successor knows the rounds its members' claims name; a member that never heard of the newest
// round (its assignment was cut off) claims an older one. So a round this server formed becomes
// the reference only once every member of it has confirmed it (reported its group's state for
// it, or re-registered claiming it); until then a new round needs a majority of the confirmed
// round AND of every round formed since. Without that, a node that joins the cut-off side while
// a silent member is still within its lease makes a round with that member in it, and the
// cut-off side is a majority of that round while the other side is one of the round before.
//
// "Known to be gone" is what makes the rule cost nothing where there is no doubt: a member
// whose agent left, or whose stream this server saw break while the member was still heard
// from (its agent died, its host is up), cannot be on the other side of a partition, so it is
// not counted (nor waited for to confirm). Members lost to silence (their lease expired) are:
// they may be alive elsewhere. A server that recovers a run from its agents' claims (a
// successor) knows the round's size and the ranks a claim names as gone (the host whose address
// refused connections); the claims themselves confirm it.
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
  // Whether `node_id` (a member of a round) is connected to this server.
  using IsPresent = std::function<bool(const std::string& node_id)>;

  // A round was recovered from its members' claims: it is the reference, confirmed, and every
  // earlier one is forgotten. Its members by group rank ("" for a rank whose node this server
  // never saw, e.g. the lost host), and the ranks known gone.
  void Reset(int64_t round, std::vector<std::string> members_by_rank,
             std::set<int> gone_ranks = {});
  // This server formed `round`: it counts beside the rounds before it until its members confirm.
  void Formed(int64_t round, std::vector<std::string> members_by_rank);
  // `node_id` showed that it knows `round` (a group status or a claim of it). When that leaves
  // no member of a round unconfirmed, the rounds before it are forgotten.
  void Confirmed(int64_t round, const std::string& node_id);
  // The member left cleanly or died where this server saw it: it no longer counts, in any round.
  void MarkGone(const std::string& node_id);

  // Whether the present members make a majority of every round still counted (see above). True
  // when no round is known or every member is known gone: there is nobody a round could be
  // split from.
  bool HeldBy(const IsPresent& present) const;
  // "1 of the 3 members of round 4 that may still be alive (here: node a; silent: node b,
  // node c)" for the oldest round counted that is not held (the newest when all are) — for the
  // log line and the close message when the majority never comes back.
  std::string Describe(const IsPresent& present) const;

  bool empty() const { return rounds_.empty(); }
  // How many rounds count (the confirmed one and those formed since): for tests and the log.
  size_t rounds_counted() const { return rounds_.size(); }

 private:
  struct Round {
    int64_t number = 0;
    std::vector<std::string> members;  // by group rank
    std::set<int> gone;                // group ranks known gone
    std::set<int> unconfirmed;         // group ranks that have not shown they know it
    bool HeldBy(const IsPresent& present) const;
  };
  // Forgets the rounds before the newest one that every member still counted has confirmed.
  void ForgetConfirmedPast();

  std::vector<Round> rounds_;  // oldest first; every one but the first awaits confirmation
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_LAST_ROUND_MAJORITY_H_
