#include "rendezvous/core/rank_assignment.h"

#include <algorithm>

namespace ddprun::rendezvous {
namespace {

// Gives each unranked candidate `rank_of(candidate)` when it is in range and free.
template <typename RankOf>
void Claim(const std::vector<RankCandidate>& ordered, RankOf rank_of, std::vector<int>* ranks,
           std::vector<bool>* taken) {
  const int n = static_cast<int>(ordered.size());
  for (int i = 0; i < n; ++i) {
    const int want = rank_of(ordered[i]);
    if ((*ranks)[i] < 0 && want >= 0 && want < n && !(*taken)[want]) {
      (*ranks)[i] = want;
      (*taken)[want] = true;
    }
  }
}

}  // namespace

std::vector<int> AssignGroupRanks(const std::vector<RankCandidate>& ordered) {
  const int n = static_cast<int>(ordered.size());
  std::vector<int> ranks(n, -1);
  std::vector<bool> taken(n, false);
  Claim(
      ordered, [](const RankCandidate& c) { return c.requested_rank; }, &ranks, &taken);
  const bool keep_ranks = std::all_of(ordered.begin(), ordered.end(),
                                      [n](const RankCandidate& c) { return c.previous_rank < n; });
  if (keep_ranks) {
    Claim(
        ordered, [](const RankCandidate& c) { return c.previous_rank; }, &ranks, &taken);
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
