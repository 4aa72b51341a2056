#include "rendezvous/grpc/proto_convert.h"

#include <chrono>

#include "gtest/gtest.h"

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
}

}  // namespace
}  // namespace ddprun::rendezvous
