// The status of a run of the etcd rendezvous (for `ddprun status --rdzv-backend=etcd`), read
// from etcd in one range read: the coordinator's last written state, the live node keys, and
// its judges' report (each member's compute figures, the checkpoint advice).
#ifndef DDPRUN_RENDEZVOUS_ETCD_ETCD_STATUS_H_
#define DDPRUN_RENDEZVOUS_ETCD_ETCD_STATUS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "rendezvous/api/run_status.h"
#include "rendezvous/etcd/etcd_client.h"

namespace ddprun::rendezvous {

// kNotFound when etcd holds nothing of the run (never started, or finished and cleaned up).
absl::StatusOr<RunStatus> QueryEtcdRunStatus(EtcdClient* client, const std::string& prefix,
                                             const std::string& run_id, Duration budget);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_ETCD_ETCD_STATUS_H_
