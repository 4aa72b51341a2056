#include "rendezvous/core/last_round_majority.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddprun::rendezvous {

void LastRoundMajority::Reset(std::vector<std::string> members_by_rank, std::set<int> gone_ranks) {
  members_ = std::move(members_by_rank);
  gone_ = std::move(gone_ranks);
}

void LastRoundMajority::MarkGone(const std::string& node_id) {
  if (node_id.empty()) return;
  for (size_t r = 0; r < members_.size(); ++r) {
    if (members_[r] == node_id) gone_.insert(static_cast<int>(r));
  }
}

bool LastRoundMajority::HeldBy(const IsPresent& present) const {
  int alive = 0, here = 0;
  bool lowest_here = false, lowest_seen = false;
  for (size_t r = 0; r < members_.size(); ++r) {
    if (gone_.count(static_cast<int>(r)) > 0) continue;
    const bool is_here = !members_[r].empty() && present(members_[r]);
    if (!lowest_seen) {
      lowest_seen = true;
      lowest_here = is_here;
    }
    ++alive;
    if (is_here) ++here;
  }
  if (alive == 0) return true;
  return 2 * here > alive || (2 * here == alive && lowest_here);
}

std::string LastRoundMajority::Describe(const IsPresent& present, int64_t round) const {
  std::vector<std::string> here, silent;
  for (size_t r = 0; r < members_.size(); ++r) {
    if (gone_.count(static_cast<int>(r)) > 0) continue;
    const std::string who =
        members_[r].empty() ? absl::StrCat("group rank ", r) : absl::StrCat("node ", members_[r]);
    (!members_[r].empty() && present(members_[r]) ? here : silent).push_back(who);
  }
  return absl::StrCat(
      here.size(), " of the ", here.size() + silent.size(), " members of round ", round,
      " that may still be alive (here: ", here.empty() ? "none" : absl::StrJoin(here, ", "),
      "; silent: ", silent.empty() ? "none" : absl::StrJoin(silent, ", "), ")");
}

}  // namespace ddprun::rendezvous
