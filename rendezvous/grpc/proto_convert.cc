#include "rendezvous/grpc/proto_convert.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "common/strings.h"
#include "rendezvous/api/cause.h"
#include "rendezvous/api/crash_loop.h"
#include "rendezvous/api/eviction.h"
#include "rendezvous/grpc/preflight_convert.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;

int64_t Millis(Duration d) { return std::chrono::duration_cast<milliseconds>(d).count(); }

// One numbering (cause.h): its ends and a few in between, checked where both are visible.
static_assert(static_cast<int>(Cause::kUnspecified) == proto::CAUSE_UNSPECIFIED);
static_assert(static_cast<int>(Cause::kUnknownSignal) == proto::CAUSE_UNKNOWN_SIGNAL);
static_assert(static_cast<int>(Cause::kHang) == proto::CAUSE_HANG);
static_assert(static_cast<int>(Cause::kServerRestart) == proto::CAUSE_SERVER_RESTART);
static_assert(kLastCause == proto::Cause_MAX);

// A report's death cause: death_cause, or from an agent from before it, its cause_kind label
// (a label, never prose: anything else is kUnspecified).
Cause ReportedDeathCause(const proto::WorkerFailure& p) {
  if (p.death_cause() != proto::CAUSE_UNSPECIFIED) return FromProto(p.death_cause());
  const std::optional<Cause> labelled = CauseFromLabel(p.cause_kind());
  return labelled.value_or(Cause::kUnspecified);
}

}  // namespace

proto::Cause ToProto(Cause cause) { return static_cast<proto::Cause>(cause); }

Cause FromProto(proto::Cause cause) {
  return CauseFromNumber(static_cast<int>(cause)).value_or(Cause::kUnspecified);
}

proto::Join ToProto(const NodeInfo& node, const RunTimeouts& timeouts) {
  proto::Join j;
  j.set_run_id(node.run_id);
  j.set_node_id(node.node_id);
  j.set_hostname(node.hostname);
  j.set_min_nodes(node.min_nodes);
  j.set_max_nodes(node.max_nodes);
  j.set_nproc_per_node(node.nproc_per_node);
  j.set_master_port(node.master_port);
  if (node.requested_node_rank >= 0) j.set_requested_node_rank(node.requested_node_rank);
  j.set_local_addr(node.local_addr);
  j.set_max_restarts(node.max_restarts);
  j.set_formerly_node_id(node.formerly_node_id);
  j.set_join_timeout_ms(Millis(timeouts.join_timeout));
  j.set_last_call_timeout_ms(Millis(timeouts.last_call_timeout));
  j.set_keep_alive_interval_ms(Millis(timeouts.keep_alive_interval));
  j.set_keep_alive_max_attempt(timeouts.keep_alive_max_attempt);
  if (timeouts.failure_last_call_timeout) {
    j.set_failure_last_call_timeout_ms(Millis(*timeouts.failure_last_call_timeout));
  }
  if (timeouts.liveness.on()) *j.mutable_liveness() = ToProto(timeouts.liveness);
  j.set_evict_slow(timeouts.slow_nodes.evict);
  if (timeouts.mtbf.has_value()) j.set_mtbf_ms(ToMillis(*timeouts.mtbf));
  j.set_preflight_port(node.preflight_port);
  if (timeouts.preflight.enabled) *j.mutable_preflight() = ToProto(timeouts.preflight);
  return j;
}

proto::LivenessConf ToProto(const LivenessSettings& l) {
  proto::LivenessConf p;
  p.set_enabled(l.on());
  p.set_verdict(l.mode == LivenessMode::kAuto ? proto::LivenessConf::WITH_SPARE
                                              : proto::LivenessConf::ALWAYS);
  p.set_interval_ms(Millis(l.interval));
  p.set_phi(l.phi);
  p.set_pause_ms(Millis(l.pause));
  p.set_min_sd_ms(Millis(l.min_sd));
  p.set_observers(l.observers);
  p.set_max_rate(l.max_rate);
  return p;
}

LivenessSettings FromProto(const proto::LivenessConf& p) {
  LivenessSettings l;
  l.mode = !p.enabled()                                     ? LivenessMode::kOff
           : p.verdict() == proto::LivenessConf::WITH_SPARE ? LivenessMode::kAuto
                                                            : LivenessMode::kOn;
  // Unsaid fields keep the defaults; bad ones pass through for validation to refuse.
  if (p.interval_ms() != 0) l.interval = milliseconds(p.interval_ms());
  if (p.phi() != 0) l.phi = p.phi();
  if (p.pause_ms() != 0) l.pause = milliseconds(p.pause_ms());
  if (p.min_sd_ms() != 0) l.min_sd = milliseconds(p.min_sd_ms());
  if (p.observers() != 0) l.observers = p.observers();
  if (p.max_rate() != 0) l.max_rate = p.max_rate();
  return l;
}

proto::WorkerFailure ToProto(const WorkerFailure& f) {
  proto::WorkerFailure p;
  p.set_hostname(f.hostname);
  p.set_rank(f.rank);
  p.set_local_rank(f.local_rank);
  p.set_pid(f.pid);
  p.set_exit_code(f.exit_code);
  p.set_signal(f.signal);
  p.set_message(f.message);
  p.set_hang(f.hang);
  p.set_death_cause(ToProto(f.cause_kind));
  if (f.cause_kind != Cause::kUnspecified) p.set_cause_kind(CauseLabel(f.cause_kind));
  p.set_cause(f.cause);
  p.set_signature(f.signature);
  p.set_made_progress(f.made_progress);
  return p;
}

proto::Heartbeat ToProto(const std::vector<RankProgress>& progress) {
  proto::Heartbeat h;
  for (const RankProgress& p : progress) {
    proto::RankProgress* out = h.add_progress();
    out->set_rank(p.rank);
    out->set_step(p.step);
    out->set_idle_ms(p.idle_ms);
  }
  return h;
}

proto::Heartbeat ToProto(const NodeFigures& figures) {
  proto::Heartbeat h;
  if (!figures.checkpoint.empty()) *h.mutable_checkpoint() = ToProto(figures.checkpoint);
  for (const RankCompute& c : figures.compute) {
    proto::RankCompute* out = h.add_compute();
    out->set_rank(c.rank);
    out->set_compute_ms(c.compute_ms);
    out->set_steps(c.steps);
  }
  return h;
}

std::vector<RankCompute> ComputeFromProto(const proto::Heartbeat& h) {
  std::vector<RankCompute> out;
  for (const proto::RankCompute& c : h.compute())
    out.push_back({c.rank(), c.compute_ms(), c.steps()});
  return out;
}

CheckpointReport CheckpointFromProto(const proto::Heartbeat& h) {
  CheckpointReport r;
  if (!h.has_checkpoint()) return r;
  const proto::CheckpointCosts& c = h.checkpoint();
  if (c.has_save_s()) r.save_s = c.save_s();
  if (c.has_recovery_s()) r.recovery_s = c.recovery_s();
  if (c.has_effective_ratio()) r.effective_ratio = c.effective_ratio();
  return r;
}

proto::CheckpointCosts ToProto(const CheckpointReport& r) {
  proto::CheckpointCosts c;
  if (r.save_s) c.set_save_s(*r.save_s);
  if (r.recovery_s) c.set_recovery_s(*r.recovery_s);
  if (r.effective_ratio) c.set_effective_ratio(*r.effective_ratio);
  return c;
}

std::vector<RankProgress> FromProto(const proto::Heartbeat& h) {
  std::vector<RankProgress> out;
  for (const proto::RankProgress& p : h.progress())
    out.push_back({p.rank(), p.step(), p.idle_ms()});
  return out;
}

WorkerFailure FromProto(const proto::WorkerFailure& p) {
  WorkerFailure f;
  f.hostname = p.hostname();
  f.rank = p.rank();
  f.local_rank = p.local_rank();
  f.pid = p.pid();
  f.exit_code = p.exit_code();
  f.signal = p.signal();
  f.message = p.message();
  f.hang = p.hang();
  f.cause_kind = ReportedDeathCause(p);
  f.cause = p.cause();
  f.signature = p.signature();
  f.made_progress = p.made_progress();
  return f;
}

Assignment FromProto(const proto::Assignment& p) {
  Assignment a;
  a.round = p.round();
  a.group_rank = p.group_rank();
  a.group_world_size = p.group_world_size();
  a.rank_offset = p.rank_offset();
  a.world_size = p.world_size();
  a.master_addr = p.master_addr();
  a.master_port = p.master_port();
  a.restart_count = p.restart_count();
  a.max_restarts = p.max_restarts();
  for (const proto::Successor& s : p.successors()) a.successors.push_back({s.node_id(), s.addr()});
  return a;
}

proto::Assignment ToProto(const Assignment& a) {
  proto::Assignment p;
  p.set_round(a.round);
  p.set_group_rank(a.group_rank);
  p.set_group_world_size(a.group_world_size);
  p.set_rank_offset(a.rank_offset);
  p.set_world_size(a.world_size);
  p.set_master_addr(a.master_addr);
  p.set_master_port(a.master_port);
  p.set_restart_count(a.restart_count);
  p.set_max_restarts(a.max_restarts);
  for (const Successor& s : a.successors) {
    proto::Successor* out = p.add_successors();
    out->set_node_id(s.node_id);
    out->set_addr(s.addr);
  }
  return p;
}

proto::Resume ToProto(const ResumeClaim& c) {
  proto::Resume p;
  *p.mutable_last() = ToProto(c.last);
  p.mutable_last()->clear_successors();  // the server that reads the claim makes its own
  if (c.gone_group_rank) p.set_gone_group_rank(*c.gone_group_rank);
  p.set_restarts_used(c.restarts_used);
  p.set_set_aside(c.set_aside);
  switch (c.group) {
    case ResumeClaim::Group::kWaiting:
      p.set_group(proto::Resume::WAITING);
      break;
    case ResumeClaim::Group::kRunning:
      p.set_group(proto::Resume::RUNNING);
      break;
    case ResumeClaim::Group::kSucceeded:
      p.set_group(proto::Resume::SUCCEEDED);
      break;
    case ResumeClaim::Group::kFailed:
      p.set_group(proto::Resume::FAILED);
      break;
  }
  if (c.failure) *p.mutable_failure() = ToProto(*c.failure);
  return p;
}

ResumeClaim FromProto(const proto::Resume& p) {
  ResumeClaim c;
  c.last = FromProto(p.last());
  c.restarts_used = p.restarts_used();
  if (p.has_gone_group_rank()) c.gone_group_rank = p.gone_group_rank();
  c.set_aside = p.set_aside();
  switch (p.group()) {
    case proto::Resume::RUNNING:
      c.group = ResumeClaim::Group::kRunning;
      break;
    case proto::Resume::SUCCEEDED:
      c.group = ResumeClaim::Group::kSucceeded;
      break;
    case proto::Resume::FAILED:
      c.group = ResumeClaim::Group::kFailed;
      c.failure = FromProto(p.failure());
      break;
    default:
      c.group = ResumeClaim::Group::kWaiting;
      break;
  }
  return c;
}

absl::Status CloseStatus(const proto::Close& close) {
  const int code = close.code();
  if (close.ending() == proto::Close::CRASH_LOOP ||
      (close.ending() == proto::Close::ENDING_UNSPECIFIED &&
       code == static_cast<int>(absl::StatusCode::kAborted))) {
    return CrashLoopStop(close.message());
  }
  if (close.ending() == proto::Close::EVICTED) return EvictedStop(close.message());
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(close.message());
  }
  return absl::Status(static_cast<absl::StatusCode>(code), close.message());
}

std::optional<HangNotice> HangOf(const proto::Restart& restart) {
  if (!restart.hang()) return std::nullopt;
  return HangNotice{restart.straggler()};
}

RestartFacts FactsOf(const proto::Restart& restart) {
  RestartFacts f;
  f.spare_used = restart.spare_used();
  if (restart.has_lost_silent_s()) f.lost_silent_s = restart.lost_silent_s();
  return f;
}

StandbyNotice FromProto(const proto::Standby& p) {
  return StandbyNotice{p.round(), p.members(), p.position(), p.set_aside()};
}

std::optional<HangNotice> HangOf(const proto::Close& close) {
  if (!close.root_cause().hang()) return std::nullopt;
  return HangNotice{close.straggler()};
}

JoinRequest FromProto(const proto::Join& j, const RunTimeouts& defaults,
                      const std::string& peer_host) {
  JoinRequest r;
  r.node.run_id = j.run_id();
  r.node.node_id = j.node_id();
  r.node.hostname = j.hostname();
  r.node.min_nodes = j.min_nodes();
  r.node.max_nodes = j.max_nodes();
  r.node.nproc_per_node = j.nproc_per_node();
  r.node.master_port = j.master_port();
  r.node.requested_node_rank = j.has_requested_node_rank() ? j.requested_node_rank() : -1;
  r.node.local_addr = j.local_addr();
  r.node.max_restarts = j.max_restarts();
  r.node.formerly_node_id = j.formerly_node_id();
  r.formerly_member_key = j.formerly_member_key();
  r.peer_host = peer_host;
  if (j.has_resume()) {
    r.resume = FromProto(j.resume());
    r.member_key = j.resume().member_key();
  }
  r.timeouts = defaults;
  // Negative values pass through so that validation refuses them.
  if (j.join_timeout_ms() != 0) r.timeouts.join_timeout = milliseconds(j.join_timeout_ms());
  if (j.last_call_timeout_ms() != 0) {
    r.timeouts.last_call_timeout = milliseconds(j.last_call_timeout_ms());
  }
  if (j.keep_alive_interval_ms() != 0) {
    r.timeouts.keep_alive_interval = milliseconds(j.keep_alive_interval_ms());
  }
  if (j.keep_alive_max_attempt() != 0) {
    r.timeouts.keep_alive_max_attempt = j.keep_alive_max_attempt();
  }
  if (j.has_failure_last_call_timeout_ms()) {
    r.timeouts.failure_last_call_timeout = milliseconds(j.failure_last_call_timeout_ms());
  }
  if (j.has_liveness()) r.timeouts.liveness = FromProto(j.liveness());
  r.timeouts.slow_nodes.evict = j.evict_slow();
  if (j.has_mtbf_ms() && j.mtbf_ms() > 0) r.timeouts.mtbf = std::chrono::milliseconds(j.mtbf_ms());
  r.timeouts.preflight = FromProto(j.preflight(), defaults.preflight);
  // A port is a port: anything else is no listener.
  if (j.preflight_port() > 0 && j.preflight_port() < 65536) {
    r.node.preflight_port = j.preflight_port();
  }
  return r;
}

proto::ServerMessage ToProto(const Outgoing& out) {
  proto::ServerMessage m;
  if (const auto* joined = std::get_if<JoinedNotice>(&out.msg)) {
    m.mutable_joined()->set_peer_addr(joined->peer_host);
    m.mutable_joined()->set_keep_alive_interval_ms(Millis(joined->keep_alive_interval));
    m.mutable_joined()->set_member_key(joined->member_key);
    if (joined->liveness.on()) *m.mutable_joined()->mutable_liveness() = ToProto(joined->liveness);
  } else if (const auto* a = std::get_if<Assignment>(&out.msg)) {
    *m.mutable_assignment() = ToProto(*a);
  } else if (const auto* r = std::get_if<RestartNotice>(&out.msg)) {
    m.mutable_restart()->set_round(r->round);
    m.mutable_restart()->set_reason(r->reason);
    m.mutable_restart()->set_cause(ToProto(r->cause));
    m.mutable_restart()->set_restart_count(r->restart_count);
    if (r->hang.has_value()) {
      m.mutable_restart()->set_hang(true);
      m.mutable_restart()->set_straggler(r->hang->straggler);
    }
    m.mutable_restart()->set_spare_used(r->facts.spare_used);
    if (r->facts.lost_silent_s) m.mutable_restart()->set_lost_silent_s(*r->facts.lost_silent_s);
  } else if (const auto* standby = std::get_if<StandbyNotice>(&out.msg)) {
    m.mutable_standby()->set_round(standby->round);
    m.mutable_standby()->set_members(standby->members);
    m.mutable_standby()->set_position(standby->position);
    m.mutable_standby()->set_set_aside(standby->set_aside);
  } else if (const auto* preflight = std::get_if<PreflightRequest>(&out.msg)) {
    *m.mutable_preflight() = ToProto(*preflight);
  } else if (const auto* resumed = std::get_if<ResumedNotice>(&out.msg)) {
    m.mutable_resumed()->set_round(resumed->round);
  } else if (const auto* c = std::get_if<CloseNotice>(&out.msg)) {
    proto::Close* p = m.mutable_close();
    p->set_code(static_cast<int>(c->status.code()));
    p->set_message(std::string(c->status.message()));
    if (c->root_cause) *p->mutable_root_cause() = ToProto(*c->root_cause);
    p->set_straggler(c->straggler);
    p->set_given_up(c->given_up);
    if (IsCrashLoopStop(c->status)) p->set_ending(proto::Close::CRASH_LOOP);
    if (IsEvictedStop(c->status)) p->set_ending(proto::Close::EVICTED);
  }
  return m;
}

proto::CheckpointAdviceStatus ToProto(const CheckpointAdvice& a) {
  proto::CheckpointAdviceStatus p;
  p.set_interval_s(a.interval_s);
  p.set_mtbf_s(a.mtbf_s);
  p.set_failures(a.failures);
  p.set_trained_s(a.trained_s);
  p.set_prior(a.prior);
  p.set_save_s(a.save_s);
  p.set_recovery_s(a.recovery_s);
  p.set_predicted_ratio(a.predicted_ratio);
  if (a.measured_ratio.has_value()) p.set_measured_ratio(*a.measured_ratio);
  return p;
}

CheckpointAdvice FromProto(const proto::CheckpointAdviceStatus& p) {
  CheckpointAdvice a;
  a.interval_s = p.interval_s();
  a.mtbf_s = p.mtbf_s();
  a.failures = p.failures();
  a.trained_s = p.trained_s();
  a.prior = p.prior();
  a.save_s = p.save_s();
  a.recovery_s = p.recovery_s();
  a.predicted_ratio = p.predicted_ratio();
  if (p.has_measured_ratio()) a.measured_ratio = p.measured_ratio();
  return a;
}

void ToProto(const RunStatus& s, proto::StatusResponse* r) {
  r->set_run_id(s.run_id);
  r->set_round(s.round);
  r->set_phase(RunPhaseName(s.phase));
  r->set_restarts_used(s.restarts_used);
  r->set_max_restarts(s.max_restarts);
  r->set_min_nodes(s.min_nodes);
  r->set_max_nodes(s.max_nodes);
  r->set_close_message(s.close_message);
  r->set_spares(s.spares);
  r->set_spares_used(s.spares_used);
  r->set_slow_nodes(s.slow_nodes);
  if (s.checkpoint_advice) *r->mutable_checkpoint_advice() = ToProto(*s.checkpoint_advice);
  if (s.preflight.has_value()) *r->mutable_preflight() = ToProto(*s.preflight);
  for (const MemberStatus& m : s.members) {
    proto::Member* p = r->add_members();
    p->set_node_id(m.node_id);
    p->set_hostname(m.hostname);
    p->set_addr(m.addr);
    p->set_group_rank(m.group_rank);
    p->set_state(m.state);
    p->set_nproc_per_node(m.nproc_per_node);
    p->set_compute_ms(m.compute_ms);
    p->set_compute_ratio(m.compute_ratio);
    p->set_slow(m.slow);
  }
}

RunStatus FromProto(const proto::StatusResponse& r) {
  RunStatus s;
  s.run_id = r.run_id();
  s.round = r.round();
  for (RunPhase phase : {RunPhase::kRunning, RunPhase::kRecovering, RunPhase::kClosed}) {
    if (r.phase() == RunPhaseName(phase)) s.phase = phase;
  }
  s.restarts_used = r.restarts_used();
  s.max_restarts = r.max_restarts();
  s.min_nodes = r.min_nodes();
  s.max_nodes = r.max_nodes();
  s.close_message = r.close_message();
  s.server_instance = r.server_instance();
  s.spares = r.spares();
  s.spares_used = r.spares_used();
  s.slow_nodes = r.slow_nodes();
  if (r.has_checkpoint_advice()) s.checkpoint_advice = FromProto(r.checkpoint_advice());
  if (r.has_preflight()) s.preflight = FromProto(r.preflight());
  for (const proto::Member& m : r.members()) {
    MemberStatus member{m.node_id(),    m.hostname(),       m.addr(),
                        m.group_rank(), m.nproc_per_node(), m.state()};
    member.compute_ms = m.compute_ms();
    member.compute_ratio = m.compute_ratio();
    member.slow = m.slow();
    s.members.push_back(std::move(member));
  }
  return s;
}

std::string PeerHost(const std::string& grpc_peer) {
  std::string rest = grpc_peer;
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (absl::StartsWith(rest, scheme)) rest = rest.substr(std::string(scheme).size());
  }
  rest = absl::StrReplaceAll(rest, {{"%5B", "["}, {"%5D", "]"}, {"%25", "%"}});
  absl::StatusOr<HostPort> hp = ParseHostPort("peer", rest, 0);
  if (!hp.ok()) return "";
  std::string host = hp->host;
  if (absl::StartsWith(host, "::ffff:") && host.find('.') != std::string::npos) {
    host = host.substr(7);
  }
  return host;
}

}  // namespace ddprun::rendezvous
