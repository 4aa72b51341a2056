#include "launcher/causes/death_explainer.h"

#include <signal.h>

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ddprun::launcher {

// How long a SIGKILL death waits for its memory cgroup's OOM count (Explain): a few scheduler
// ticks of a preempted OOM killer. Blocks the agent's loop that long at most, once per such death.
constexpr std::chrono::milliseconds kOomCountGrace{20};

namespace {

std::pair<std::unique_ptr<KernelLog>, std::string> Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<KernelLog>> log = KernelLog::OpenAtEnd(path);
  if (log.ok()) return {*std::move(log), ""};
  return {nullptr, std::string(log.status().message())};  // names the path and why
}

}  // namespace

DeathExplainer::DeathExplainer(const std::string& kmsg_path, CgroupFiles cgroups)
    : cgroups_(std::move(cgroups)) {
  auto [log, why] = Open(kmsg_path);
  log_ = std::move(log);
  unreadable_because_ = std::move(why);
}

DeathExplainer::DeathExplainer(std::unique_ptr<KernelLog> log, std::string unreadable_because,
                               CgroupFiles cgroups)
    : log_(std::move(log)),
      unreadable_because_(std::move(unreadable_because)),
      cgroups_(std::move(cgroups)) {}

void DeathExplainer::Watch(const std::vector<pid_t>& live_pids) {
  std::map<pid_t, Watched> now;
  for (pid_t pid : live_pids) {
    std::optional<MemoryCgroupRef> cgroup = cgroups_.Of(pid);
    if (!cgroup.has_value()) continue;
    auto it = watched_.find(pid);
    if (it != watched_.end() && it->second.cgroup == *cgroup) {
      now.emplace(pid, std::move(it->second));
      continue;
    }
    // New to this cgroup (a worker may move itself, or be moved): count from here.
    std::optional<int64_t> kills = cgroups_.OomKills(*cgroup);
    if (!kills.has_value()) continue;
    now.emplace(pid, Watched{*std::move(cgroup), *kills});
  }
  watched_ = std::move(now);
}

void DeathExplainer::Drain() {
  if (log_ == nullptr) return;
  // Bounded: under a kernel that never stops writing, the loop still returns.
  for (int i = 0; i < 16; ++i) {
    constexpr size_t kBatch = 4096;
    KernelLog::Batch batch = log_->ReadAvailable(kBatch);
    lost_ |= batch.lost;
    if (batch.unparseable > 0 && batch.unparseable >= batch.records.size()) {
      // /dev/kmsg gives records only: this is some other file (DDPRUN_KERNEL_LOG=/dev/zero).
      // Stop reading it rather than spin on it; deaths are explained without it, saying why.
      unreadable_because_ =
          absl::StrCat("kernel log ", log_->name(), " is not a kernel log (", batch.unparseable,
                       " of its records could not be read as /dev/kmsg's)");
      LogWarning(unreadable_because_);
      log_.reset();
      return;
    }
    const bool more = batch.reads >= kBatch;
    for (KmsgRecord& r : batch.records) {
      recent_.push_back(std::move(r));
      if (recent_.size() > kMaxRecent) recent_.pop_front();
    }
    if (!more) return;
  }
}

DeathCause DeathExplainer::Explain(const WorkerDeath& given) {
  Drain();
  WorkerDeath death = given;
  if (auto it = watched_.find(death.pid); it != watched_.end() && !death.cgroup.has_value()) {
    // The cgroup outlives the worker; its count now is at least the count at the death, but
    // for a moment: the OOM killer counts its kill after it sent the SIGKILL (mm/oom_kill.c,
    // __oom_kill_process), and on busy cores the victim can die and be reaped first. A SIGKILL
    // whose count has not risen yet gets a few milliseconds for it.
    std::optional<int64_t> kills = cgroups_.OomKills(it->second.cgroup);
    const auto grace_ends = std::chrono::steady_clock::now() + kOomCountGrace;
    while (death.signal == SIGKILL && kills.has_value() && *kills <= it->second.kills_first_seen &&
           std::chrono::steady_clock::now() < grace_ends) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      kills = cgroups_.OomKills(it->second.cgroup);
    }
    if (kills.has_value()) {
      CgroupOomCount count;
      count.path = it->second.cgroup.path;
      count.kills_before = it->second.kills_first_seen;
      count.kills_after = *kills;
      count.limit_bytes = cgroups_.LimitBytes(it->second.cgroup);
      death.cgroup = std::move(count);
    }
  }
  KernelEvidence evidence;
  evidence.readable = log_ != nullptr;
  evidence.unreadable_because = unreadable_because_;
  evidence.lost_records = lost_;
  evidence.records.assign(recent_.begin(), recent_.end());
  return ExplainDeath(death, evidence);
}

}  // namespace ddprun::launcher
