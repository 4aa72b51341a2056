#include "rendezvous/etcd/etcd_status.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/etcd/records.pb.h"
#include "rendezvous/etcd/etcd_keys.h"
#include "rendezvous/grpc/preflight_convert.h"
#include "rendezvous/grpc/proto_convert.h"

namespace ddprun::rendezvous {

absl::StatusOr<RunStatus> QueryEtcdRunStatus(EtcdClient* client, const std::string& prefix,
                                             const std::string& run_id, Duration budget) {
  const EtcdKeys keys(prefix, run_id);
  etcdserverpb::RangeRequest range;
  range.set_key(keys.run());
  range.set_range_end(EtcdPrefixEnd(keys.run()));
  auto read = client->Range(range, budget);
  if (!read.ok()) return read.status();
  if (read->kvs_size() == 0) {
    return absl::NotFoundError(absl::StrCat("no run '", run_id, "' under ", prefix, " in etcd"));
  }
  proto::etcd::RunSnapshotRecord state;
  proto::etcd::JudgesReport judges;
  std::map<std::string, proto::etcd::NodeRecord> nodes;
  std::map<std::string, int64_t> arrival;
  for (const auto& kv : read->kvs()) {
    std::string id;
    if (kv.key() == keys.state()) {
      state.ParseFromString(kv.value());
    } else if (kv.key() == keys.report()) {
      judges.ParseFromString(kv.value());
    } else if (keys.Parse(kv.key(), "nodes", &id)) {
      nodes[id].ParseFromString(kv.value());
      arrival[id] = kv.create_revision();
    }
  }
  RunStatus s;
  s.run_id = run_id;
  s.round = state.round();
  s.phase = static_cast<RunPhase>(state.phase());
  s.restarts_used = state.restarts_used();
  s.spares_used = state.spares_used();
  if (state.has_preflight()) s.preflight = FromProto(state.preflight());
  if (judges.has_checkpoint_advice()) s.checkpoint_advice = FromProto(judges.checkpoint_advice());
  std::map<std::string, const proto::Member*> judged;  // node -> its compute figures
  for (const auto& m : judges.members()) judged[m.node_id()] = &m;
  s.max_restarts = state.first().max_restarts();
  s.min_nodes = state.first().min_nodes();
  s.max_nodes = state.first().max_nodes();
  if (s.phase == RunPhase::kClosed) {
    s.close_message = state.close_code() == 0 ? "succeeded" : state.close_message();
  }
  if (!state.has_first() && !nodes.empty()) {  // no coordinator has written yet
    const auto& first = std::min_element(arrival.begin(), arrival.end(), [](auto& a, auto& b) {
                          return a.second < b.second;
                        })->first;
    s.max_restarts = nodes[first].join().max_restarts();
    s.min_nodes = nodes[first].join().min_nodes();
    s.max_nodes = nodes[first].join().max_nodes();
  }
  std::map<std::string, std::pair<int, bool>> rank;  // node -> (group rank, in round)
  std::map<std::string, bool> set_aside;             // node -> set aside (RunState's Node)
  for (const auto& m : state.members()) {
    rank[m.node_id()] = {m.group_rank(), m.in_round()};
    set_aside[m.node_id()] = !m.set_aside().empty();
  }
  for (const auto& [id, record] : nodes) {
    MemberStatus m;
    m.node_id = id;
    m.hostname = record.join().hostname();
    m.addr = record.join().local_addr().empty() ? record.peer_host() : record.join().local_addr();
    m.nproc_per_node = record.join().nproc_per_node();
    auto it = rank.find(id);
    const bool in_round = it != rank.end() && it->second.second;
    m.group_rank = in_round ? it->second.first : -1;
    // Beyond a running round: a spare, unless set aside (RunState::Status says the same).
    m.state = in_round                        ? "running"
              : set_aside[id]                 ? "set aside"
              : s.phase == RunPhase::kRunning ? "spare"
                                              : "waiting";
    if (m.state == "spare") ++s.spares;
    if (auto j = judged.find(id); in_round && j != judged.end()) {
      m.compute_ms = j->second->compute_ms();
      m.compute_ratio = j->second->compute_ratio();
      m.slow = j->second->slow();
      if (m.slow) ++s.slow_nodes;
    }
    s.members.push_back(std::move(m));
  }
  std::sort(s.members.begin(), s.members.end(), [&](const MemberStatus& a, const MemberStatus& b) {
    if ((a.group_rank >= 0) != (b.group_rank >= 0)) return a.group_rank >= 0;
    if (a.group_rank >= 0) return a.group_rank < b.group_rank;
    return arrival[a.node_id] < arrival[b.node_id];
  });
  return s;
}

}  // namespace ddprun::rendezvous
