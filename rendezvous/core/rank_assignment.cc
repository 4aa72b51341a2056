#include "rendezvous/core/rank_assignment.h"

namespace ddprun::rendezvous {

std::vector<int> AssignGroupRanks(const std::vector<RankCandidate>& ordered) {
  const int n = static_cast<int>(ordered.size());
  std::vector<int> ranks(n, -1);
  std::vector<bool> taken(n, false);
  for (int i = 0; i < n; ++i) {
    const int want = ordered[i].requested_rank;
    if (want >= 0 && want < n && !taken[want]) {
      ranks[i] = want;
      taken[want] = true;
    }
  }
  int next_free = 0;
  for (int i = 0; i < n; ++i) {
    if (ranks[i] >= 0) continue;
    while (taken[next_free]) ++next_free;
    ranks[i] = next_free;
    taken[next_free] = true;
  }
  return ranks;
}

}  // namespace ddprun::rendezvous
