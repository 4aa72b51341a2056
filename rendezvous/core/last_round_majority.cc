#include "rendezvous/core/last_round_majority.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddprun::rendezvous {

void LastRoundMajority::Reset(int64_t round, std::vector<std::string> members_by_rank,
                              std::set<int> gone_ranks) {
  rounds_.clear();
  rounds_.push_back(Round{round, std::move(members_by_rank), std::move(gone_ranks), {}});
}

void LastRoundMajority::Formed(int64_t round, std::vector<std::string> members_by_rank) {
  Round formed{round, std::move(members_by_rank), {}, {}};
  for (size_t r = 0; r < formed.members.size(); ++r) {
    formed.unconfirmed.insert(static_cast<int>(r));
  }
  rounds_.push_back(std::move(formed));
}

void LastRoundMajority::Confirmed(int64_t round, const std::string& node_id) {
  if (node_id.empty()) return;
  for (Round& r : rounds_) {
    if (r.number != round) continue;
    for (size_t rank = 0; rank < r.members.size(); ++rank) {
      if (r.members[rank] == node_id) r.unconfirmed.erase(static_cast<int>(rank));
    }
  }
  ForgetConfirmedPast();
}

void LastRoundMajority::MarkGone(const std::string& node_id) {
  if (node_id.empty()) return;
  for (Round& r : rounds_) {
    for (size_t rank = 0; rank < r.members.size(); ++rank) {
      if (r.members[rank] == node_id) r.gone.insert(static_cast<int>(rank));
    }
  }
  ForgetConfirmedPast();
}

void LastRoundMajority::ForgetConfirmedPast() {
  for (size_t i = rounds_.size(); i-- > 1;) {
    const Round& r = rounds_[i];
    bool all_confirmed = true;
    for (int rank : r.unconfirmed) {
      if (r.gone.count(rank) == 0) all_confirmed = false;
    }
    if (all_confirmed) {
      rounds_.erase(rounds_.begin(), rounds_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

bool LastRoundMajority::Round::HeldBy(const IsPresent& present) const {
  int alive = 0, here = 0;
  bool lowest_here = false, lowest_seen = false;
  for (size_t r = 0; r < members.size(); ++r) {
    if (gone.count(static_cast<int>(r)) > 0) continue;
    const bool is_here = !members[r].empty() && present(members[r]);
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

bool LastRoundMajority::HeldBy(const IsPresent& present) const {
  for (const Round& r : rounds_) {
    if (!r.HeldBy(present)) return false;
  }
  return true;
}

std::string LastRoundMajority::Describe(const IsPresent& present) const {
  if (rounds_.empty()) return "no round yet";
  const Round* shown = &rounds_.back();
  for (const Round& r : rounds_) {
    if (!r.HeldBy(present)) {
      shown = &r;
      break;
    }
  }
  std::vector<std::string> here, silent;
  for (size_t r = 0; r < shown->members.size(); ++r) {
    if (shown->gone.count(static_cast<int>(r)) > 0) continue;
    const std::string who = shown->members[r].empty() ? absl::StrCat("group rank ", r)
                                                      : absl::StrCat("node ", shown->members[r]);
    (!shown->members[r].empty() && present(shown->members[r]) ? here : silent).push_back(who);
  }
  return absl::StrCat(
      here.size(), " of the ", here.size() + silent.size(), " members of round ", shown->number,
      " that may still be alive (here: ", here.empty() ? "none" : absl::StrJoin(here, ", "),
      "; silent: ", silent.empty() ? "none" : absl::StrJoin(silent, ", "), ")");
}

}  // namespace ddprun::rendezvous
