#include "launcher/health/gpu_release.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "launcher/process/proc_info.h"

namespace ddprun::launcher {

namespace {

// One process per line; a node with 8 GPUs and a few processes each stays far below this.
constexpr size_t kMaxListedProcesses = 4096;

}  // namespace

std::vector<GpuProcess> ParseComputeApps(absl::string_view csv) {
  std::vector<GpuProcess> out;
  for (absl::string_view line : absl::StrSplit(csv, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    if (fields.size() != 2) continue;
    GpuProcess p;
    int pid = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[0]), &pid) || pid <= 0) continue;
    p.pid = pid;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[1]), &p.used_mib)) p.used_mib = 0;
    out.push_back(p);
  }
  return out;
}

std::vector<GpuProcess> HeldByWorkers(const std::vector<GpuProcess>& listed,
                                      const std::set<pid_t>& worker_pids,
                                      const std::function<pid_t(pid_t)>& group_of) {
  std::vector<GpuProcess> held;
  for (const GpuProcess& p : listed) {
    if (worker_pids.count(p.pid) > 0 || worker_pids.count(group_of(p.pid)) > 0) held.push_back(p);
  }
  return held;
}

std::string DescribeHeld(const std::vector<GpuProcess>& held) {
  std::vector<std::string> parts;
  for (const GpuProcess& p : held) {
    parts.push_back(p.used_mib >= 1024
                        ? absl::StrFormat("pid %d (%.1f GiB)", p.pid, p.used_mib / 1024.0)
                        : absl::StrFormat("pid %d (%d MiB)", p.pid, p.used_mib));
  }
  return absl::StrJoin(parts, ", ");
}

namespace {

HealthCheckOptions QueryOptions(const GpuReleaseOptions& o) {
  HealthCheckOptions q;
  // The path goes through sh -c: quoted, so a path with spaces is one word.
  q.command = absl::StrCat("'", o.nvidia_smi,
                           "' --query-compute-apps=pid,used_memory --format=csv,noheader,nounits");
  q.timeout = std::chrono::seconds(10);  // a driver that hangs must not hold the restart longer
  q.env = o.env;
  q.tail_lines = kMaxListedProcesses;
  return q;
}

}  // namespace

GpuReleaseWait::GpuReleaseWait(EventLoop* loop, GpuReleaseOptions options)
    : loop_(loop), options_(std::move(options)), query_(loop, QueryOptions(options_)) {}

GpuReleaseWait::~GpuReleaseWait() {
  if (poll_timer_ != 0) loop_->CancelTimer(poll_timer_);
}

void GpuReleaseWait::Wait(std::set<pid_t> worker_pids,
                          std::function<void(const GpuReleaseResult&)> done) {
  if (waiting()) return;
  done_ = std::move(done);
  worker_pids_ = std::move(worker_pids);
  started_ = std::chrono::steady_clock::now();
  Ask();
}

void GpuReleaseWait::Ask() {
  poll_timer_ = 0;
  query_.Run([this](const HealthVerdict& answer) { OnAnswer(answer); });
}

void GpuReleaseWait::OnAnswer(const HealthVerdict& answer) {
  GpuReleaseResult result;
  result.waited = std::chrono::steady_clock::now() - started_;
  if (!answer.passed()) {
    result.query_failed = answer.Describe();
    Finish(std::move(result));
    return;
  }
  result.held = HeldByWorkers(ParseComputeApps(absl::StrJoin(answer.tail, "\n")), worker_pids_,
                              ProcessGroupOf);
  if (result.held.empty()) {
    Finish(std::move(result));
    return;
  }
  if (result.waited + kPoll >= options_.timeout) {
    result.released = false;
    Finish(std::move(result));
    return;
  }
  poll_timer_ = loop_->AddTimerAfter(kPoll, [this] { Ask(); });
}

void GpuReleaseWait::Finish(GpuReleaseResult result) {
  worker_pids_.clear();
  if (done_) std::exchange(done_, nullptr)(result);
}

}  // namespace ddprun::launcher
