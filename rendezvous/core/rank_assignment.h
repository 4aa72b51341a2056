// How the nodes of a new round get their group ranks.
#ifndef DDPRUN_RENDEZVOUS_CORE_RANK_ASSIGNMENT_H_
#define DDPRUN_RENDEZVOUS_CORE_RANK_ASSIGNMENT_H_

#include <vector>

namespace ddprun::rendezvous {

struct RankCandidate {
  int requested_rank = -1;  // an explicit --node-rank, or -1
  int previous_rank = -1;   // a survivor's group rank in the round before, or -1 (a newcomer)
};

// Group ranks 0..n-1 for `ordered` (n nodes, in priority order: survivors of the previous round
// by their old rank, then newcomers by arrival). Explicit requests below n are honoured first
// (the first one wins a duplicate). Then:
//  - keep ranks: when every survivor's previous rank is < n, each survivor keeps it (unless an
//    explicit request took it) and the newcomers (spares) fill the holes the lost nodes left,
//    lowest hole first, in order. A lost node's data shard and sampler order go to its
//    replacement; nobody else's rank moves.
//  - compaction, otherwise (the round shrank below a survivor's rank): everyone else takes the
//    lowest free rank in order, so survivors keep their relative order.
std::vector<int> AssignGroupRanks(const std::vector<RankCandidate>& ordered);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_RANK_ASSIGNMENT_H_
