// Translation between the wire messages (proto/rendezvous.proto) and the plain structs of
// rendezvous.h / outgoing.h. Nothing else in the rendezvous code looks inside protobufs.
#ifndef DDPRUN_RENDEZVOUS_GRPC_PROTO_CONVERT_H_
#define DDPRUN_RENDEZVOUS_GRPC_PROTO_CONVERT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/api/rendezvous.h"
#include "rendezvous/api/run_config.h"
#include "rendezvous/core/outgoing.h"
#include "rendezvous/core/run_state.h"

namespace ddprun::rendezvous {

// Both sides. The cause numbers are the same in cause.h and the proto; a number this build does
// not know (a newer peer's) reads as kUnspecified.
proto::Cause ToProto(Cause cause);
Cause FromProto(proto::Cause cause);

// Agent side.
proto::Join ToProto(const NodeInfo& node, const RunTimeouts& timeouts);
proto::LivenessConf ToProto(const LivenessSettings& liveness);
LivenessSettings FromProto(const proto::LivenessConf& liveness);
proto::WorkerFailure ToProto(const WorkerFailure& failure);
proto::Heartbeat ToProto(const std::vector<RankProgress>& progress);
proto::Assignment ToProto(const Assignment& a);
proto::Resume ToProto(const ResumeClaim& claim);
ResumeClaim FromProto(const proto::Resume& p);
Assignment FromProto(const proto::Assignment& a);
WorkerFailure FromProto(const proto::WorkerFailure& f);
std::vector<RankProgress> FromProto(const proto::Heartbeat& h);
// The heartbeat that carries a node's figures (compute times and checkpoint costs), and its
// compute times (RankCompute).
proto::Heartbeat ToProto(const NodeFigures& figures);
std::vector<RankCompute> ComputeFromProto(const proto::Heartbeat& h);
// The checkpoint advice's figures a heartbeat carries (empty when none).
CheckpointReport CheckpointFromProto(const proto::Heartbeat& h);
proto::CheckpointCosts ToProto(const CheckpointReport& r);
// A Close message as the status OnClosed reports: CRASH_LOOP (or ABORTED from a server from
// before Close.ending) as CrashLoopStop.
absl::Status CloseStatus(const proto::Close& close);
// The hang a Restart or Close message tells of (the straggler); nullopt when none.
std::optional<HangNotice> HangOf(const proto::Restart& restart);
std::optional<HangNotice> HangOf(const proto::Close& close);
RestartFacts FactsOf(const proto::Restart& restart);
StandbyNotice FromProto(const proto::Standby& standby);

// Server side. Zero timeouts in `join` take `defaults`.
JoinRequest FromProto(const proto::Join& join, const RunTimeouts& defaults,
                      const std::string& peer_host);
proto::ServerMessage ToProto(const Outgoing& out);
void ToProto(const RunStatus& status, proto::StatusResponse* response);
proto::CheckpointAdviceStatus ToProto(const CheckpointAdvice& advice);
CheckpointAdvice FromProto(const proto::CheckpointAdviceStatus& advice);
// Client side of the status query: the inverse of ToProto above (an unknown phase reads as
// joining).
RunStatus FromProto(const proto::StatusResponse& response);

// The host part of a gRPC peer string ("ipv4:10.0.0.1:5000", "ipv6:[::1]:5000"), IPv4-mapped
// IPv6 addresses shown as IPv4. Empty when it cannot be parsed.
std::string PeerHost(const std::string& grpc_peer);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_PROTO_CONVERT_H_
