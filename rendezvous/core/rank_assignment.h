// How the nodes of a new round get their group ranks.
#ifndef DDPRUN_RENDEZVOUS_CORE_RANK_ASSIGNMENT_H_
#define DDPRUN_RENDEZVOUS_CORE_RANK_ASSIGNMENT_H_

#include <vector>

namespace ddprun::rendezvous {

struct RankCandidate {
  int requested_rank = -1;  // an explicit --node-rank, or -1
};

// Group ranks 0..n-1 for `ordered` (n nodes, in priority order: survivors of the previous round
// by their old rank, then newcomers by arrival). Explicit requests below n are honoured (the
// first one wins a duplicate); everyone else takes the lowest free rank in order, so survivors
// keep their relative order.
std::vector<int> AssignGroupRanks(const std::vector<RankCandidate>& ordered);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_RANK_ASSIGNMENT_H_
