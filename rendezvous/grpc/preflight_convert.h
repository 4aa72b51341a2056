// The preflight's messages (rendezvous/api/preflight.h) to and from their protobuf (issue 41).
#ifndef DDPRUN_RENDEZVOUS_GRPC_PREFLIGHT_CONVERT_H_
#define DDPRUN_RENDEZVOUS_GRPC_PREFLIGHT_CONVERT_H_

#include "proto/rendezvous.pb.h"
#include "rendezvous/api/preflight.h"

namespace ddprun::rendezvous {

proto::PreflightConf ToProto(const PreflightSettings& settings);
// `defaults` where the join said nothing (an agent from before --preflight: off).
PreflightSettings FromProto(const proto::PreflightConf& conf, const PreflightSettings& defaults);
proto::PreflightRequest ToProto(const PreflightRequest& request);
PreflightRequest FromProto(const proto::PreflightRequest& request);
proto::PreflightReport ToProto(const PreflightReport& report);
PreflightReport FromProto(const proto::PreflightReport& report);
proto::PreflightStatus ToProto(const PreflightSummary& summary);
PreflightSummary FromProto(const proto::PreflightStatus& status);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_PREFLIGHT_CONVERT_H_
