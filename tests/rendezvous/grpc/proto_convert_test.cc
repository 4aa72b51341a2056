#include "rendezvous/grpc/proto_convert.h"

#include <chrono>

#include "gtest/gtest.h"
#include "rendezvous/api/cause.h"
#include "rendezvous/api/crash_loop.h"
#include "rendezvous/api/eviction.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;

TEST(ProtoConvertTest, JoinRoundTripsAndZeroTimeoutsTakeTheDefaults) {
  NodeInfo n;
  n.run_id = "r";
  n.node_id = "id";
  n.hostname = "h";
  n.min_nodes = 2;
  n.max_nodes = 4;
  n.nproc_per_node = 8;
  n.master_port = 29501;
  n.requested_node_rank = 0;  // rank 0 must survive the optional field
  n.local_addr = "10.1.1.1";
  n.max_restarts = 5;
  RunTimeouts t;
  t.join_timeout = milliseconds(1234);
  t.last_call_timeout = milliseconds(0);
  t.keep_alive_interval = milliseconds(250);
  t.keep_alive_max_attempt = 7;
  RunTimeouts defaults;
  defaults.last_call_timeout = milliseconds(999);
  JoinRequest r = FromProto(ToProto(n, t), defaults, "::1");
  EXPECT_EQ(r.node.run_id, "r");
  EXPECT_EQ(r.node.node_id, "id");
  EXPECT_EQ(r.node.hostname, "h");
  EXPECT_EQ(r.node.min_nodes, 2);
  EXPECT_EQ(r.node.max_nodes, 4);
  EXPECT_EQ(r.node.nproc_per_node, 8);
  EXPECT_EQ(r.node.master_port, 29501);
  EXPECT_EQ(r.node.requested_node_rank, 0);
  EXPECT_EQ(r.node.local_addr, "10.1.1.1");
  EXPECT_EQ(r.node.max_restarts, 5);
  EXPECT_EQ(r.peer_host, "::1");
  EXPECT_EQ(r.timeouts.join_timeout, milliseconds(1234));
  EXPECT_EQ(r.timeouts.last_call_timeout, milliseconds(999));
  EXPECT_EQ(r.timeouts.keep_alive_interval, milliseconds(250));
  EXPECT_EQ(r.timeouts.keep_alive_max_attempt, 7);

  // failure_last_call_timeout: unset stays unset, and 0 is a value (form at once), not "default".
  EXPECT_FALSE(r.timeouts.failure_last_call_timeout.has_value());
  t.failure_last_call_timeout = milliseconds(0);
  EXPECT_EQ(FromProto(ToProto(n, t), defaults, "").timeouts.failure_last_call_timeout,
            milliseconds(0));

  n.requested_node_rank = -1;
  EXPECT_FALSE(ToProto(n, t).has_requested_node_rank());
  EXPECT_EQ(FromProto(ToProto(n, t), defaults, "").node.requested_node_rank, -1);
}

TEST(ProtoConvertTest, CloseCarriesTheStatusCode) {
  Outgoing out{7, CloseNotice{absl::ResourceExhaustedError("budget spent"), std::nullopt}};
  proto::ServerMessage m = ToProto(out);
  ASSERT_TRUE(m.has_close());
  absl::Status s = CloseStatus(m.close());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "budget spent");
  proto::Close bogus;
  bogus.set_code(999);
  EXPECT_EQ(CloseStatus(bogus).code(), absl::StatusCode::kUnknown);
}

// Every cause crosses the wire as itself and has one label that names it back.
TEST(ProtoConvertTest, EveryCauseRoundTripsThroughTheProtoAndItsLabel) {
  for (int n = 0; n <= kLastCause; ++n) {
    const Cause cause = static_cast<Cause>(n);
    EXPECT_EQ(FromProto(ToProto(cause)), cause) << n;
    EXPECT_EQ(CauseFromLabel(CauseLabel(cause)), cause) << CauseLabel(cause);
  }
  EXPECT_EQ(FromProto(static_cast<proto::Cause>(kLastCause + 1)), Cause::kUnspecified)
      << "a newer peer's cause is unspecified here";
  EXPECT_EQ(CauseFromLabel("oom\"} 99\nforged"), std::nullopt);
}

// The restart's cause travels as a field: rewording its reason changes nothing.
TEST(ProtoConvertTest, RestartCarriesItsCauseWhateverItsReasonSays) {
  for (const char* reason : {"node n3 (n3) was lost: its connection broke", "n3 vanished"}) {
    Outgoing out{7, RestartNotice{4, Cause::kNodeLostStream, reason, std::nullopt, 1}};
    const proto::ServerMessage m = ToProto(out);
    ASSERT_TRUE(m.has_restart());
    EXPECT_EQ(m.restart().cause(), proto::CAUSE_NODE_LOST_STREAM);
    EXPECT_EQ(m.restart().reason(), reason);
  }
}

// Issue 40: what a restart says of spares and detection, the standby message and the status
// counts go through the protos and back.
TEST(ProtoConvertTest, SpareFactsStandbyAndCountsRoundTrip) {
  RestartNotice notice{4, Cause::kNodeLostStream, "n3 lost", std::nullopt, 1};
  proto::ServerMessage m = ToProto(Outgoing{7, notice});
  EXPECT_FALSE(FactsOf(m.restart()).spare_used);
  EXPECT_FALSE(FactsOf(m.restart()).lost_silent_s.has_value()) << "unset: not a loss";
  notice.facts = {true, 0.28};
  m = ToProto(Outgoing{7, notice});
  EXPECT_TRUE(FactsOf(m.restart()).spare_used);
  EXPECT_DOUBLE_EQ(*FactsOf(m.restart()).lost_silent_s, 0.28);

  m = ToProto(Outgoing{7, StandbyNotice{5, 16, 2}});
  ASSERT_TRUE(m.has_standby());
  const StandbyNotice standby = FromProto(m.standby());
  EXPECT_EQ(standby.round, 5);
  EXPECT_EQ(standby.members, 16);
  EXPECT_EQ(standby.position, 2);

  RunStatus status;
  status.phase = RunPhase::kRunning;
  status.spares = 3;
  status.spares_used = 7;
  status.members.push_back({"n9", "host9", "10.0.0.9", -1, 8, "spare"});
  proto::StatusResponse response;
  ToProto(status, &response);
  const RunStatus back = FromProto(response);
  EXPECT_EQ(back.spares, 3);
  EXPECT_EQ(back.spares_used, 7);
  EXPECT_EQ(back.members[0].state, "spare");
}

// The crash-loop stop has its own ending beside ABORTED, and a server from before the ending
// (which sent ABORTED for nothing else) is read the same way.
TEST(ProtoConvertTest, TheCrashLoopCloseIsToldApart) {
  Outgoing out{7, CloseNotice{CrashLoopStop(CrashLoopMessage("rank 0 on n1: exit code 1")), {}}};
  proto::ServerMessage m = ToProto(out);
  ASSERT_TRUE(m.has_close());
  EXPECT_EQ(m.close().ending(), proto::Close::CRASH_LOOP);
  EXPECT_EQ(m.close().code(), static_cast<int>(absl::StatusCode::kAborted));
  EXPECT_TRUE(IsCrashLoopStop(CloseStatus(m.close())));
  m.mutable_close()->clear_ending();
  EXPECT_TRUE(IsCrashLoopStop(CloseStatus(m.close())));
  proto::Close other;
  other.set_code(static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(IsCrashLoopStop(CloseStatus(other)));
  Outgoing budget{7, CloseNotice{absl::ResourceExhaustedError("budget spent"), std::nullopt}};
  EXPECT_EQ(ToProto(budget).close().ending(), proto::Close::ENDING_UNSPECIFIED);
  EXPECT_FALSE(IsCrashLoopStop(absl::AbortedError("status for round 3 but the run is at 4")));
}

// Issue 41: an eviction as slow has its own ending; an agent from before it reads the
// FAILED_PRECONDITION code as a rendezvous failure.
TEST(ProtoConvertTest, TheEvictionCloseIsToldApart) {
  Outgoing out{7, CloseNotice{EvictedStop("this node was evicted from the run as slow"), {}}};
  proto::ServerMessage m = ToProto(out);
  ASSERT_TRUE(m.has_close());
  EXPECT_EQ(m.close().ending(), proto::Close::EVICTED);
  EXPECT_EQ(m.close().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(IsEvictedStop(CloseStatus(m.close())));
  m.mutable_close()->clear_ending();
  EXPECT_FALSE(IsEvictedStop(CloseStatus(m.close())));
}

// A worker's death cause crosses as the enum, and as its label for servers from before it; an
// agent from before the enum sends only the label, which names a known cause or none.
TEST(ProtoConvertTest, AFailuresDeathCauseKeepsItsType) {
  WorkerFailure f;
  f.signal = 9;
  f.cause_kind = Cause::kOomKill;
  const proto::WorkerFailure p = ToProto(f);
  EXPECT_EQ(p.death_cause(), proto::CAUSE_OOM_KILL);
  EXPECT_EQ(p.cause_kind(), "oom_kill");
  EXPECT_EQ(FromProto(p).cause_kind, Cause::kOomKill);
  proto::WorkerFailure old_agent;
  old_agent.set_cause_kind("gpu_error");
  EXPECT_EQ(FromProto(old_agent).cause_kind, Cause::kGpuError);
  old_agent.set_cause_kind("oom\"} 99\nddprun_rdzv_forged");
  EXPECT_EQ(FromProto(old_agent).cause_kind, Cause::kUnspecified);
}

TEST(ProtoConvertTest, HangOfRestartAndClose) {
  proto::Restart restart;
  EXPECT_FALSE(HangOf(restart).has_value());
  restart.set_hang(true);
  restart.set_straggler("rank 3 on n2");
  ASSERT_TRUE(HangOf(restart).has_value());
  EXPECT_EQ(HangOf(restart)->straggler, "rank 3 on n2");

  proto::Close close;
  close.set_straggler("rank 1 on n1");
  EXPECT_FALSE(HangOf(close).has_value());  // a straggler without a hung root cause is none
  close.mutable_root_cause()->set_hang(true);
  ASSERT_TRUE(HangOf(close).has_value());
  EXPECT_EQ(HangOf(close)->straggler, "rank 1 on n1");
}

// The status query's answer reads back as the server wrote it, each phase by its one name.
TEST(ProtoConvertTest, RunStatusRoundTripsInEveryPhase) {
  for (RunPhase phase :
       {RunPhase::kJoining, RunPhase::kRunning, RunPhase::kRecovering, RunPhase::kClosed}) {
    RunStatus status;
    status.run_id = "job";
    status.round = 3;
    status.phase = phase;
    status.restarts_used = 1;
    status.max_restarts = 5;
    status.min_nodes = 2;
    status.max_nodes = 4;
    status.close_message = "done";
    status.members.push_back({"n1", "host1", "10.0.0.1", 0, 8, "running"});
    proto::StatusResponse response;
    ToProto(status, &response);
    const RunStatus back = FromProto(response);
    EXPECT_EQ(back.phase, phase) << RunPhaseName(phase);
    EXPECT_EQ(back.run_id, "job");
    EXPECT_EQ(back.round, 3);
    EXPECT_EQ(back.restarts_used, 1);
    EXPECT_EQ(back.max_restarts, 5);
    EXPECT_EQ(back.min_nodes, 2);
    EXPECT_EQ(back.max_nodes, 4);
    EXPECT_EQ(back.close_message, "done");
    ASSERT_EQ(back.members.size(), 1u);
    EXPECT_EQ(back.members[0].hostname, "host1");
    EXPECT_EQ(back.members[0].nproc_per_node, 8);
    EXPECT_EQ(back.members[0].state, "running");
  }
}

TEST(ProtoConvertTest, AssignmentRoundTrips) {
  Assignment a;
  a.round = 3;
  a.group_rank = 1;
  a.group_world_size = 2;
  a.rank_offset = 4;
  a.world_size = 8;
  a.master_addr = "m";
  a.master_port = 5;
  a.restart_count = 1;
  a.max_restarts = 2;
  a.successors = {{"n1", "10.0.0.1"}, {"n2", "::1"}};
  Assignment b = FromProto(ToProto(Outgoing{1, a}).assignment());
  EXPECT_EQ(b.round, 3);
  EXPECT_EQ(b.group_rank, 1);
  EXPECT_EQ(b.group_world_size, 2);
  EXPECT_EQ(b.rank_offset, 4);
  EXPECT_EQ(b.world_size, 8);
  EXPECT_EQ(b.master_addr, "m");
  EXPECT_EQ(b.master_port, 5);
  EXPECT_EQ(b.restart_count, 1);
  EXPECT_EQ(b.max_restarts, 2);
  ASSERT_EQ(b.successors.size(), 2u);
  EXPECT_EQ(b.successors[1].node_id, "n2");
  EXPECT_EQ(b.successors[1].addr, "::1");
  // A re-registration's claim carries the assignment without them: the server that reads it
  // makes its own list.
  ResumeClaim claim;
  claim.last = a;
  EXPECT_EQ(ToProto(claim).last().successors_size(), 0);
  EXPECT_EQ(FromProto(ToProto(claim)).set_aside, "");
  claim.set_aside = "kept out by the preflight";
  EXPECT_EQ(FromProto(ToProto(claim)).set_aside, "kept out by the preflight");
}

}  // namespace
}  // namespace ddprun::rendezvous
