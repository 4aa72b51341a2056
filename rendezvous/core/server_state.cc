#include "rendezvous/core/server_state.h"

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/message_limit.h"

namespace ddprun::rendezvous {
namespace {

Outbox CloseOnly(ConnId conn, absl::Status status) {
  Outbox out;
  out.push_back({conn, CloseNotice{std::move(status), std::nullopt}});
  return out;
}

}  // namespace

absl::Status ServerState::Validate(const JoinRequest& request) const {
  const NodeInfo& n = request.node;
  if (n.run_id.empty()) return absl::InvalidArgumentError("join without a run id (--rdzv-id)");
  if (n.node_id.empty()) return absl::InvalidArgumentError("join without a node id");
  if (n.run_id.find('/') != std::string::npos) {
    // '/' separates a scoped token's namespace from its run ids (ScopedRunId).
    return absl::InvalidArgumentError("a run id must not contain '/'");
  }
  for (const std::string* s :
       {&n.run_id, &n.node_id, &n.hostname, &n.local_addr, &n.formerly_node_id}) {
    if (s->size() > limits_.max_id_length) {
      return absl::InvalidArgumentError(
          absl::StrCat("join field longer than ", limits_.max_id_length, " bytes"));
    }
    // Ids go into log lines, the status page and file names: a newline or an escape sequence
    // in one would forge a log line or a terminal's state.
    for (const char c : *s) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return absl::InvalidArgumentError(absl::StrCat(
            "join field \"", absl::CEscape(s->substr(0, 64)), "\" contains a control character"));
      }
    }
  }
  if (request.timeouts.liveness.on()) {
    if (absl::Status l = ValidateLivenessSettings(request.timeouts.liveness); !l.ok()) return l;
  }
  if (n.min_nodes < 1 || n.max_nodes < n.min_nodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid --nnodes=", n.min_nodes, ":", n.max_nodes));
  }
  if (n.max_nodes > limits_.max_nodes_per_run) {
    return absl::InvalidArgumentError(absl::StrCat("--nnodes max ", n.max_nodes,
                                                   " exceeds this server's limit of ",
                                                   limits_.max_nodes_per_run, " nodes per run"));
  }
  if (n.nproc_per_node < 1 || n.nproc_per_node > 1 << 20) {
    return absl::InvalidArgumentError(absl::StrCat("invalid --nproc-per-node=", n.nproc_per_node));
  }
  if (n.max_restarts < 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid --max-restarts=", n.max_restarts));
  }
  if (n.master_port < 0 || n.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("invalid master port ", n.master_port));
  }
  const RunTimeouts& t = request.timeouts;
  if (t.keep_alive_interval <= Duration::zero() || t.keep_alive_max_attempt < 1 ||
      t.join_timeout < Duration::zero() || t.last_call_timeout < Duration::zero() ||
      t.failure_last_call_timeout.value_or(Duration::zero()) < Duration::zero()) {
    return absl::InvalidArgumentError("invalid rendezvous timeouts");
  }
  return absl::OkStatus();
}

ServerState::Run* ServerState::RunOf(ConnId conn, std::string* run_id) {
  auto it = conn_run_.find(conn);
  if (it == conn_run_.end()) return nullptr;
  auto run = runs_.find(it->second);
  if (run == runs_.end()) return nullptr;
  *run_id = it->second;
  return &run->second;
}

void ServerState::Forget(std::map<std::string, Run>::iterator it) {
  metrics_.recoveries.erase(it->first);
  runs_.erase(it);
}

void ServerState::SecurityLog(std::string line) {
  PushBounded(&security_log_, std::move(line), kMaxUntaken);
}

absl::Status ServerState::CheckMemberKey(JoinRequest* request) {
  if (keys_ == nullptr || !request->resume.has_value()) return absl::OkStatus();
  const std::string& run_id = request->node.run_id;
  const std::string& node_id = request->node.node_id;
  if (SameKey(keys_->KeyFor(run_id, node_id), request->member_key)) return absl::OkStatus();
  auto it = runs_.find(run_id);
  const RunState* run = it == runs_.end() ? nullptr : it->second.state.get();
  const std::string who = absl::StrCat("run '", absl::CEscape(run_id), "', node '",
                                       absl::CEscape(node_id), "' from ", request->peer_host);
  if (run != nullptr && run->HasNode(node_id)) {
    // Every node a run knows got its key from this process (in Joined): a wrong one is not
    // that node's agent.
    SecurityLog(absl::StrCat("refused a re-registration without the member's key: ", who));
    return absl::PermissionDeniedError(absl::StrCat(
        "run '", run_id, "': re-registration as node '", node_id,
        "' refused: it does not carry the member key that node was given when it joined"));
  }
  if (run != nullptr && !run->RebuildsFromClaims()) {
    // A run with rounds: a claim from a node it does not know only stops the claimant's own
    // workers (run_state_recovery.cc, rule 2); it cannot act on the run.
    return absl::OkStatus();
  }
  if (keys_->durable()) {
    SecurityLog(
        absl::StrCat("ignored a re-registration claim with a wrong member key (it joins "
                     "as a new node): ",
                     who));
    request->resume.reset();
    return absl::OkStatus();
  }
  if (it == runs_.end() || !it->second.warned_unverified) {
    SecurityLog(
        absl::StrCat("accepting unverified re-registrations for a run this server does "
                     "not know (no --secret-file: keys of an earlier server process "
                     "cannot be checked): ",
                     who));
    if (it != runs_.end()) it->second.warned_unverified = true;
  }
  return absl::OkStatus();
}

void ServerState::CheckFormerMemberKey(JoinRequest* request) {
  std::string& former = request->node.formerly_node_id;
  if (keys_ == nullptr || former.empty()) return;
  if (SameKey(keys_->KeyFor(request->node.run_id, former), request->formerly_member_key)) return;
  // Believed, the claim would count this node as that member for the majority of an embedded
  // server's run (last_round_majority.h) and make it the host when that member hosts. Only the
  // agent that joined as it holds its key; a key of an earlier server process cannot be checked
  // here, and then the node is only not counted as the member it was.
  SecurityLog(absl::StrCat("ignored a claim to be formerly node '", absl::CEscape(former),
                           "' without that node's member key: run '",
                           absl::CEscape(request->node.run_id), "', node '",
                           absl::CEscape(request->node.node_id), "' from ", request->peer_host,
                           " (it joins as a new node only)"));
  former.clear();
}

absl::Status ServerState::CheckRunLimits(const JoinRequest& request) const {
  int open = 0, of_client = 0;
  for (const auto& [id, run] : runs_) {
    if (run.state->phase() == RunPhase::kClosed) continue;  // finished: no slot
    ++open;
    if (run.creator_peer == request.peer_host) ++of_client;
  }
  const std::string& run_id = request.node.run_id;
  if (open >= limits_.max_runs) {
    return absl::FailedPreconditionError(absl::StrCat("rendezvous server is at its limit of ",
                                                      limits_.max_runs, " runs; cannot start run '",
                                                      run_id, "'"));
  }
  if (limits_.max_runs_per_client > 0 && of_client >= limits_.max_runs_per_client) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous server is at its limit of ", limits_.max_runs_per_client,
                     " open runs per client (", request.peer_host, " has started ", of_client,
                     "); cannot start run '", run_id, "'"));
  }
  return absl::OkStatus();
}

void ServerState::TrimClosedRuns() {
  int closed = 0;
  for (const auto& [id, run] : runs_) closed += run.closed_at.has_value() ? 1 : 0;
  while (closed > limits_.max_closed_runs) {
    auto oldest = runs_.end();
    for (auto it = runs_.begin(); it != runs_.end(); ++it) {
      if (it->second.closed_at &&
          (oldest == runs_.end() || *it->second.closed_at < *oldest->second.closed_at)) {
        oldest = it;
      }
    }
    Forget(oldest);
    --closed;
  }
}

Outbox ServerState::Join(ConnId conn, const JoinRequest& request_in, TimePoint now) {
  if (conn_run_.count(conn) > 0) {
    // A second join on one stream: a protocol error. The first join stands (a stream is bound
    // to its run).
    return {};
  }
  if (absl::Status invalid = Validate(request_in); !invalid.ok()) {
    ++metrics_.refused["invalid_join"];
    return CloseOnly(conn, invalid);
  }
  JoinRequest request = request_in;
  // A scoped token's runs live in its namespace: another token's holder can neither join them
  // nor take their ids first.
  request.node.run_id = ScopedRunId(request.token_scope, request.node.run_id);
  if (absl::Status refused = CheckMemberKey(&request); !refused.ok()) {
    ++metrics_.refused["member_key"];
    return CloseOnly(conn, refused);
  }
  CheckFormerMemberKey(&request);
  const std::string& run_id = request.node.run_id;
  auto it = runs_.find(run_id);
  if (it == runs_.end()) {
    if (absl::Status limit = CheckRunLimits(request); !limit.ok()) {
      ++metrics_.refused["server_limit"];
      return CloseOnly(conn, limit);
    }
    it = runs_
             .emplace(run_id, Run{std::make_unique<RunState>(request, now, quorum_), std::nullopt,
                                  request.peer_host, /*warned_unverified=*/false})
             .first;
    if (keys_ != nullptr && request.resume.has_value() && !keys_->durable()) {
      it->second.warned_unverified = true;  // CheckMemberKey logged it (or the key was right)
    }
  } else if (static_cast<int>(it->second.state->num_nodes()) >= limits_.max_nodes_per_run) {
    ++metrics_.refused["server_limit"];
    return CloseOnly(conn, absl::FailedPreconditionError(
                               absl::StrCat("run '", run_id, "' is at this server's limit of ",
                                            limits_.max_nodes_per_run, " nodes")));
  }
  conn_run_[conn] = run_id;
  ++metrics_.joins;
  Outbox out;
  it->second.state->Join(conn, request, now, &out);
  if (keys_ != nullptr) {
    for (Outgoing& o : out) {
      if (auto* joined = std::get_if<JoinedNotice>(&o.msg); joined != nullptr && o.conn == conn) {
        joined->member_key = keys_->KeyFor(run_id, request.node.node_id);
      }
    }
  }
  AfterEvent(run_id, out, now);
  return out;
}

Outbox ServerState::Heartbeat(ConnId conn, const std::vector<RankProgress>& progress,
                              TimePoint now) {
  std::string run_id;
  Run* run = RunOf(conn, &run_id);
  if (run == nullptr) return CloseOnly(conn, absl::FailedPreconditionError("not joined"));
  run->state->Heartbeat(conn, now);
  ++metrics_.heartbeats;
  if (!progress.empty()) run->state->Progress(conn, progress, now);
  return {};
}

Outbox ServerState::Compute(ConnId conn, const std::vector<RankCompute>& compute, TimePoint now,
                            std::optional<SlowNodeChange>* change) {
  std::string run_id;
  Run* run = RunOf(conn, &run_id);
  Outbox out;
  if (run == nullptr || compute.empty() || compute.size() > 4096) return out;
  *change = run->state->Compute(conn, compute, now, &out);
  if (change->has_value()) metrics_.slow_nodes_named += (*change)->slow ? 1 : 0;
  AfterEvent(run_id, out, now);
  return out;
}

void ServerState::Checkpoint(ConnId conn, const CheckpointReport& report, TimePoint now) {
  std::string run_id;
  if (Run* run = RunOf(conn, &run_id); run != nullptr) run->state->Checkpoint(conn, report, now);
}

Outbox ServerState::Preflight(ConnId conn, const PreflightReport& report, TimePoint now) {
  std::string run_id;
  Run* run = RunOf(conn, &run_id);
  Outbox out;
  // Bounded as a node's probes are: a handful of pairs, never thousands.
  if (run == nullptr || report.pairs.size() > 64) return out;
  run->state->Preflight(conn, report, now, &out);
  AfterEvent(run_id, out, now);
  return out;
}

double ServerState::CheckpointIntervalOf(ConnId conn) const {
  auto it = conn_run_.find(conn);
  if (it == conn_run_.end()) return 0;
  auto run = runs_.find(it->second);
  if (run == runs_.end()) return 0;
  const std::optional<CheckpointAdvice>& advice = run->second.state->checkpoint_advice();
  return advice.has_value() ? advice->interval_s : 0;
}

Outbox ServerState::GroupStatus(ConnId conn, int64_t round, GroupState state,
                                const std::optional<WorkerFailure>& failure, TimePoint now,
                                absl::Status* result) {
  std::string run_id;
  Run* run = RunOf(conn, &run_id);
  if (run == nullptr) return CloseOnly(conn, absl::FailedPreconditionError("not joined"));
  std::optional<WorkerFailure> cut = failure;
  if (cut) {
    for (std::string* text : {&cut->message, &cut->cause, &cut->signature}) {
      *text = AbbreviateMessage(*text, "", limits_.max_message_length);
    }
  }
  Outbox out;
  absl::Status status = run->state->GroupStatus(conn, round, state, cut, now, &out);
  if (result != nullptr) *result = status;
  if (status.ok() && state == GroupState::kFailed) {
    ++metrics_.worker_failures[CountedDeathCause(cut.value_or(WorkerFailure{}))];
  }
  AfterEvent(run_id, out, now);
  return out;
}

Outbox ServerState::Leave(ConnId conn, const std::string& reason, TimePoint now) {
  std::string run_id;
  Run* run = RunOf(conn, &run_id);
  if (run == nullptr) return CloseOnly(conn, absl::OkStatus());
  Outbox out;
  run->state->Leave(conn, AbbreviateMessage(reason, "", limits_.max_message_length), now, &out);
  AfterEvent(run_id, out, now);
  return out;
}

Outbox ServerState::Step(ConnId conn, const std::string& json, TimePoint now) {
  std::string run_id;
  Run* run = RunOf(conn, &run_id);
  if (run == nullptr) return CloseOnly(conn, absl::FailedPreconditionError("not joined"));
  // Dropped whole, never cut: a cut object is no JSON (common/message_limit.h).
  if (json.size() > 2 * limits_.max_message_length) return {};
  run->state->Step(conn, json, now);
  metrics_.recoveries[run_id].Add(json, now);
  return {};
}

Outbox ServerState::StreamBroken(ConnId conn, TimePoint now) {
  std::string run_id;
  Run* run = RunOf(conn, &run_id);
  if (run == nullptr) return {};
  Outbox out;
  run->state->StreamBroken(conn, now, &out);
  conn_run_.erase(conn);
  AfterEvent(run_id, out, now);
  return out;
}

Outbox ServerState::Silent(ConnId conn, Duration silent_for, TimePoint now) {
  std::string run_id;
  Run* run = RunOf(conn, &run_id);
  if (run == nullptr) return {};
  Outbox out;
  run->state->Silent(conn, silent_for, now, &out);
  AfterEvent(run_id, out, now);
  return out;
}

Outbox ServerState::Tick(TimePoint now) {
  Outbox out;
  std::vector<std::string> ids;
  for (const auto& [id, run] : runs_) ids.push_back(id);
  for (const std::string& id : ids) {
    auto it = runs_.find(id);
    if (it == runs_.end()) continue;
    if (it->second.closed_at) {
      if (now - *it->second.closed_at >= limits_.closed_run_retention) Forget(it);
      continue;
    }
    Outbox run_out;
    it->second.state->Tick(now, &run_out);
    AfterEvent(id, run_out, now);
    out.insert(out.end(), run_out.begin(), run_out.end());
  }
  return out;
}

void ServerState::AfterEvent(const std::string& run_id, const Outbox& out, TimePoint now) {
  for (const Outgoing& o : out) {
    if (std::holds_alternative<CloseNotice>(o.msg)) conn_run_.erase(o.conn);
  }
  auto it = runs_.find(run_id);
  if (it == runs_.end()) return;
  RunState& run = *it->second.state;
  metrics_.Add(run.TakeRoundTimings(), run.TakeRestartCauses());
  for (std::string& line : run.TakeLog()) PushBounded(&run_log_, std::move(line), kMaxUntaken);
  OfferVerdicts(it->second, out);
  if (run.num_nodes() > 0) return;
  if (run.phase() == RunPhase::kClosed) {
    // Remembered for a while so that late agents learn why, then forgotten.
    if (!it->second.closed_at) {
      it->second.closed_at = now;
      TrimClosedRuns();
    }
  } else {
    // Every agent is gone before the run finished: nothing is left to coordinate. A new set
    // of agents with this run id starts afresh.
    Forget(it);
  }
}

void ServerState::OfferVerdicts(Run& run, const Outbox& out) {
  const RunState& state = *run.state;
  if (!state.liveness().on()) return;
  auto offer = [&](ConnId conn) {
    verdict_offers_.emplace_back(conn, state.SilenceVerdictOf(conn));
  };
  // A spare joining, taken or gone changes every member's verdict: each is offered again (one
  // walk per change of readiness, not per event). Otherwise only the streams the event spoke to
  // (a round formed, a node joined) may have another verdict.
  const bool ready = state.SpareStandsReady();
  if (std::exchange(run.spare_stood_ready, ready) != ready) {
    for (ConnId conn : state.Conns()) offer(conn);
    return;
  }
  for (const Outgoing& o : out) {
    if (state.HasConn(o.conn)) offer(o.conn);
  }
}

SilenceVerdict ServerState::SilenceVerdictOf(ConnId conn) const {
  auto it = conn_run_.find(conn);
  if (it == conn_run_.end()) return SilenceVerdict::kByLease;
  auto run = runs_.find(it->second);
  return run == runs_.end() ? SilenceVerdict::kByLease : run->second.state->SilenceVerdictOf(conn);
}

std::optional<TimePoint> ServerState::NextDeadline() const {
  std::optional<TimePoint> next;
  for (const auto& [id, run] : runs_) {
    std::optional<TimePoint> t =
        run.closed_at ? std::optional<TimePoint>(*run.closed_at + limits_.closed_run_retention)
                      : run.state->NextDeadline();
    if (t && (!next || *t < *next)) next = t;
  }
  return next;
}

std::vector<RunStatus> ServerState::AllStatus(bool with_members) const {
  std::vector<RunStatus> all;
  for (const auto& [id, run] : runs_) all.push_back(run.state->Status(with_members));
  return all;
}

absl::StatusOr<RunStatus> ServerState::Status(const std::string& run_id) const {
  auto it = runs_.find(run_id);
  if (it == runs_.end()) {
    return absl::NotFoundError(absl::StrCat("no run '", run_id, "' on this server"));
  }
  return it->second.state->Status();
}

}  // namespace ddprun::rendezvous
