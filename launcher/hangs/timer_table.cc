#include "launcher/hangs/timer_table.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace ddprun::launcher {

absl::StatusOr<TimerRequest> ParseTimerRequest(absl::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  auto field = [&](const char* name) -> const nlohmann::json* {
    auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  const nlohmann::json* pid = field("pid");
  const nlohmann::json* scope = field("scope_id");
  const nlohmann::json* expiration = field("expiration_time");
  const nlohmann::json* signal = field("signal");
  if (pid == nullptr || !pid->is_number_integer() || pid->get<int64_t>() <= 0 ||
      pid->get<int64_t>() > (1 << 22)) {
    return absl::InvalidArgumentError("no valid \"pid\"");
  }
  if (scope == nullptr || !scope->is_string()) {
    return absl::InvalidArgumentError("no string \"scope_id\"");
  }
  if (expiration == nullptr || !expiration->is_number() ||
      !std::isfinite(expiration->get<double>())) {
    return absl::InvalidArgumentError("no numeric \"expiration_time\"");
  }
  TimerRequest r;
  r.pid = static_cast<int>(pid->get<int64_t>());
  r.scope_id = scope->get<std::string>();
  r.expiration_time = expiration->get<double>();
  // torch 1.13 always sends "signal"; treat a missing one as torch's default client (SIGKILL).
  if (signal == nullptr) {
    r.signal = 9;
  } else if (signal->is_number_integer() && signal->get<int64_t>() >= -64 &&
             signal->get<int64_t>() <= 64) {
    r.signal = static_cast<int>(signal->get<int64_t>());
  } else {
    return absl::InvalidArgumentError("\"signal\" is not a signal number");
  }
  if (auto v = field("version"); v != nullptr && (!v->is_number_integer() || *v != 1)) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported version ", v->dump()));
  }
  return r;
}

bool TimerTable::Apply(const TimerRequest& request) {
  const auto key = std::make_pair(request.pid, request.scope_id);
  auto it = timers_.find(key);
  if (request.is_release()) {
    if (it != timers_.end()) {
      timers_.erase(it);
      if (--scopes_per_pid_[request.pid] == 0) scopes_per_pid_.erase(request.pid);
    }
    return true;
  }
  if (it != timers_.end()) {
    it->second = request;
    return true;
  }
  size_t& count = scopes_per_pid_[request.pid];
  if (count >= kMaxScopesPerPid) return false;
  ++count;
  timers_.emplace(key, request);
  return true;
}

std::vector<TimerTable::Expired> TimerTable::TakeExpired(double now) {
  std::map<int, Expired> by_pid;  // the chosen scope per pid
  std::vector<int> reaped;
  for (const auto& [key, t] : timers_) {
    if (t.expiration_time > now) continue;
    if (std::find(reaped.begin(), reaped.end(), t.pid) == reaped.end()) reaped.push_back(t.pid);
    if (t.signal <= 0) continue;
    auto [it, inserted] = by_pid.try_emplace(t.pid);
    if (inserted || t.expiration_time < it->second.expiration_time) {
      it->second = Expired{t.pid, t.scope_id, t.signal, t.expiration_time};
    }
  }
  for (int pid : reaped) DropPid(pid);
  std::vector<Expired> out;
  for (auto& [pid, e] : by_pid) out.push_back(std::move(e));
  std::sort(out.begin(), out.end(), [](const Expired& a, const Expired& b) {
    return a.expiration_time < b.expiration_time;
  });
  return out;
}

void TimerTable::DropPid(int pid) {
  auto it = timers_.lower_bound(std::make_pair(pid, std::string()));
  while (it != timers_.end() && it->first.first == pid) it = timers_.erase(it);
  scopes_per_pid_.erase(pid);
}

std::optional<double> TimerTable::NextExpiry() const {
  std::optional<double> next;
  for (const auto& [key, t] : timers_) {
    if (!next.has_value() || t.expiration_time < *next) next = t.expiration_time;
  }
  return next;
}

std::vector<int> TimerTable::Pids() const {
  std::vector<int> pids;
  for (const auto& [pid, n] : scopes_per_pid_) pids.push_back(pid);
  return pids;
}

}  // namespace ddprun::launcher
