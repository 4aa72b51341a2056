#include "launcher/causes/death_explainer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {
namespace {

std::pair<std::unique_ptr<KernelLog>, std::string> Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<KernelLog>> log = KernelLog::OpenAtEnd(path);
  if (log.ok()) return {*std::move(log), ""};
  return {nullptr, std::string(log.status().message())};  // names the path and why
}

}  // namespace

DeathExplainer::DeathExplainer(const std::string& kmsg_path) {
  auto [log, why] = Open(kmsg_path);
  log_ = std::move(log);
  unreadable_because_ = std::move(why);
}

DeathExplainer::DeathExplainer(std::unique_ptr<KernelLog> log, std::string unreadable_because)
    : log_(std::move(log)), unreadable_because_(std::move(unreadable_because)) {}

void DeathExplainer::Drain() {
  if (log_ == nullptr) return;
  // Bounded: under a kernel that never stops writing, the loop still returns.
  for (int i = 0; i < 16; ++i) {
    constexpr size_t kBatch = 4096;
    KernelLog::Batch batch = log_->ReadAvailable(kBatch);
    lost_ |= batch.lost;
    const bool more = batch.records.size() >= kBatch;
    for (KmsgRecord& r : batch.records) {
      recent_.push_back(std::move(r));
      if (recent_.size() > kMaxRecent) recent_.pop_front();
    }
    if (!more) return;
  }
}

DeathCause DeathExplainer::Explain(const WorkerDeath& death) {
  Drain();
  KernelEvidence evidence;
  evidence.readable = log_ != nullptr;
  evidence.unreadable_because = unreadable_because_;
  evidence.lost_records = lost_;
  evidence.records.assign(recent_.begin(), recent_.end());
  return ExplainDeath(death, evidence);
}

}  // namespace ddprun::launcher
