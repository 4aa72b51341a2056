#include "rendezvous/grpc/connection_budget.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace ddprun::rendezvous {
namespace {

// A source over its budget offers connections as fast as it can: checking its (up to tens of
// thousands of) descriptors once per offer would cost more than the offers. Between checks it
// stays refused, which is where it is anyway.
constexpr Duration kSweepInterval = std::chrono::milliseconds(100);
constexpr uint64_t kPruneEvery = 1024;

void DropOld(std::deque<TimePoint>* recent, TimePoint now, Duration window) {
  while (!recent->empty() && recent->front() + window <= now) recent->pop_front();
}

}  // namespace

ConnectionBudget::ConnectionBudget(ConnectionBudgetOptions options, IsOpen is_open)
    : options_(options), is_open_(std::move(is_open)) {}

int ConnectionBudget::open_from(const std::string& source) const {
  auto it = sources_.find(source);
  return it == sources_.end() ? 0 : static_cast<int>(it->second.fds.size());
}

void ConnectionBudget::Forget(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  auto source = sources_.find(it->second.source);
  if (source != sources_.end()) source->second.fds.erase(fd);
  by_fd_.erase(it);
}

void ConnectionBudget::Sweep(Source& source, TimePoint now) {
  if (now - source.swept < kSweepInterval) return;
  source.swept = now;
  std::vector<int> closed;
  for (int fd : source.fds) {
    auto it = by_fd_.find(fd);
    if (it == by_fd_.end() || !is_open_(fd, it->second.inode)) closed.push_back(fd);
  }
  for (int fd : closed) Forget(fd);
}

void ConnectionBudget::SweepAll(TimePoint now) {
  if (now - swept_all_ < kSweepInterval) return;
  swept_all_ = now;
  for (auto& [key, source] : sources_) {
    source.swept = {};
    Sweep(source, now);
  }
  Prune(now);
}

void ConnectionBudget::Prune(TimePoint now) {
  for (auto it = sources_.begin(); it != sources_.end();) {
    DropOld(&it->second.recent, now, options_.window);
    if (it->second.fds.empty() && it->second.recent.empty()) {
      it = sources_.erase(it);
    } else {
      ++it;
    }
  }
}

int ConnectionBudget::active_sources() const {
  int n = 0;
  for (const auto& [key, source] : sources_) n += source.fds.empty() ? 0 : 1;
  return n;
}

ConnectionBudget::Verdict ConnectionBudget::Offer(const std::string& source_key, int fd,
                                                  uint64_t inode, TimePoint now) {
  // The kernel gave this descriptor number out again: what it held before is closed.
  Forget(fd);
  if (++offers_ % kPruneEvery == 0) Prune(now);
  Source& source = sources_[source_key];
  DropOld(&source.recent, now, options_.window);
  if (static_cast<int>(source.recent.size()) >= options_.max_new_per_source) {
    return Verdict::kTooManyNew;
  }
  if (static_cast<int>(source.fds.size()) >= options_.max_open_per_source) {
    Sweep(source, now);
    if (static_cast<int>(source.fds.size()) >= options_.max_open_per_source) {
      return Verdict::kTooManyOpen;
    }
  }
  if (open() >= options_.max_open_total) {
    SweepAll(now);  // may forget `source` (pruned): looked up again below
    const Source& again = sources_[source_key];
    if (open() >= options_.max_open_total) {
      // Max-min fairness: the sources holding the most give way; one holding less than an
      // equal share (a new one above all) still gets in, from the headroom.
      const int sharing = active_sources() + (again.fds.empty() ? 1 : 0);
      const int fair = std::max(1, options_.max_open_total / std::max(1, sharing));
      if (static_cast<int>(again.fds.size()) >= fair) return Verdict::kOverFairShare;
    }
  }
  Source& kept = sources_[source_key];
  kept.recent.push_back(now);
  kept.fds.insert(fd);
  by_fd_[fd] = Kept{inode, source_key};
  return Verdict::kKeep;
}

}  // namespace ddprun::rendezvous
