// The keys of one run in etcd (all under "<prefix>/<run_id>/"):
//   nodes/<node_id>   NodeRecord: the agent's join; under the agent's lease (its liveness)
//   status/<node_id>  AgentRecord: group status or leave; under the agent's lease
//   inbox/<node_id>   InboxRecord: the coordinator's messages to the agent
//   progress/<node_id> Heartbeat: its workers' last signs of life (hang detection on); under
//                     the agent's lease
//   figures/<node_id> Heartbeat: its workers' compute times and its checkpoint costs, as the
//                     agent measured them last (the slow-node judge, the checkpoint advice), one
//                     put every 5 s; under the agent's lease
//   preflight/<node_id> PreflightReport: what the node measured when the coordinator's inbox
//                     message asked it to (the preflight before the first round); under its lease
//   advice            the run's checkpoint advice, seconds of training between checkpoints
//                     ("%.3f"), written by the coordinator when it changes
//   report            JudgesReport: the slow-node judge's figures and the checkpoint advice in
//                     full, for `ddprun status`; under the coordinator's lease
//   coordinator       the coordinator's node id; under its lease (created only if absent)
//   liveness          LivenessRecord: where the coordinator serves the liveness path; under
//                     its lease
//   state             RunSnapshotRecord: the run's durable state, written with every change
//   closed            present once the run is closed; the last agent to leave then deletes
//                     every key of the run
#ifndef DDPRUN_RENDEZVOUS_ETCD_ETCD_KEYS_H_
#define DDPRUN_RENDEZVOUS_ETCD_ETCD_KEYS_H_

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddprun::rendezvous {

class EtcdKeys {
 public:
  EtcdKeys(absl::string_view prefix, absl::string_view run_id)
      : run_(absl::StrCat(prefix, "/", run_id, "/")) {}

  const std::string& run() const { return run_; }
  std::string nodes() const { return run_ + "nodes/"; }
  std::string node(absl::string_view id) const { return absl::StrCat(run_, "nodes/", id); }
  std::string status(absl::string_view id) const { return absl::StrCat(run_, "status/", id); }
  std::string inbox(absl::string_view id) const { return absl::StrCat(run_, "inbox/", id); }
  std::string progress(absl::string_view id) const { return absl::StrCat(run_, "progress/", id); }
  std::string figures(absl::string_view id) const { return absl::StrCat(run_, "figures/", id); }
  std::string preflight(absl::string_view id) const { return absl::StrCat(run_, "preflight/", id); }
  std::string advice() const { return run_ + "advice"; }
  std::string report() const { return run_ + "report"; }
  std::string coordinator() const { return run_ + "coordinator"; }
  std::string liveness() const { return run_ + "liveness"; }
  std::string state() const { return run_ + "state"; }
  std::string closed() const { return run_ + "closed"; }

  // The node id of a nodes/, status/, inbox/, progress/, figures/ or preflight/ key; false when
  // `key` is not one of `kind`.
  bool Parse(absl::string_view key, absl::string_view kind, std::string* id) const {
    const std::string head = absl::StrCat(run_, kind, "/");
    if (!absl::StartsWith(key, head)) return false;
    *id = std::string(key.substr(head.size()));
    return true;
  }

 private:
  std::string run_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_ETCD_ETCD_KEYS_H_
