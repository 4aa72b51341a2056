// EtcdCoordinator and RunState's Snapshot/Restore without etcd: a map stands for the store, and
// the coordinator's transactions are applied to it, so a second coordinator can take over from
// what the first one wrote.
#include "rendezvous/etcd/etcd_coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "proto/etcd/records.pb.h"
#include "rendezvous/grpc/preflight_convert.h"
#include "rendezvous/grpc/proto_convert.h"
#include "tests/rendezvous/core/state_test_util.h"

namespace ddprun::rendezvous {
namespace {

using testing::MakeJoin;

// The run's keys at the newest revision, and the events a watch would deliver.
class FakeStore {
 public:
  mvccpb::Event Put(const std::string& key, const std::string& value) {
    mvccpb::KeyValue& kv = kvs_[key];
    kv.set_key(key);
    kv.set_value(value);
    kv.set_mod_revision(++revision_);
    if (kv.create_revision() == 0) kv.set_create_revision(revision_);
    kv.set_version(kv.version() + 1);
    mvccpb::Event e;
    e.set_type(mvccpb::Event::PUT);
    *e.mutable_kv() = kv;
    return e;
  }
  mvccpb::Event Delete(const std::string& key) {
    mvccpb::Event e;
    e.set_type(mvccpb::Event::DELETE);
    e.mutable_kv()->set_key(key);
    e.mutable_kv()->set_mod_revision(++revision_);
    kvs_.erase(key);
    return e;
  }
  // Applies a coordinator's write (its compare is taken as true).
  std::vector<mvccpb::Event> Apply(const etcdserverpb::TxnRequest& txn) {
    std::vector<mvccpb::Event> events;
    for (const auto& op : txn.success()) {
      if (op.has_request_delete_range()) {
        events.push_back(Delete(op.request_delete_range().key()));
      } else {
        events.push_back(Put(op.request_put().key(), op.request_put().value()));
      }
    }
    return events;
  }
  std::vector<mvccpb::KeyValue> All() const {
    std::vector<mvccpb::KeyValue> out;
    for (const auto& [k, kv] : kvs_) out.push_back(kv);
    return out;
  }
  int64_t revision() const { return revision_; }
  const std::string& value(const std::string& key) { return kvs_[key].value(); }
  bool has(const std::string& key) const { return kvs_.count(key) > 0; }

 private:
  std::map<std::string, mvccpb::KeyValue> kvs_;
  int64_t revision_ = 0;
};

std::string NodeValue(const std::string& id, int min_nodes, int max_nodes) {
  proto::etcd::NodeRecord r;
  *r.mutable_join() = ToProto(MakeJoin("run", id, min_nodes, max_nodes).node,
                              MakeJoin("run", id, min_nodes, max_nodes).timeouts);
  r.set_peer_host("10.0.0." + id);
  return r.SerializeAsString();
}

// A join of a run whose liveness path is on as by default (liveness=auto).
std::string NodeValueWithLiveness(const std::string& id, int min_nodes, int max_nodes) {
  JoinRequest join = MakeJoin("run", id, min_nodes, max_nodes);
  join.timeouts.liveness.mode = LivenessMode::kAuto;
  proto::etcd::NodeRecord r;
  *r.mutable_join() = ToProto(join.node, join.timeouts);
  r.set_peer_host("10.0.0." + id);
  return r.SerializeAsString();
}

std::vector<proto::ServerMessage> Inbox(FakeStore& store, const EtcdKeys& keys,
                                        const std::string& id) {
  proto::etcd::InboxRecord r;
  r.ParseFromString(store.value(keys.inbox(id)));
  return {r.messages().begin(), r.messages().end()};
}

class EtcdCoordinatorTest : public ::testing::Test {
 protected:
  // Node `id` joins: its key appears and the coordinator sees it.
  void JoinNode(EtcdCoordinator& c, const std::string& id, int min_nodes, int max_nodes) {
    c.OnEvent(store_.Put(keys_.node(id), NodeValue(id, min_nodes, max_nodes)), now_);
  }
  // Node `id` joins a run with the preflight on (its probe listener at 4000 + id).
  void JoinNodeWithPreflight(EtcdCoordinator& c, int id, int min_nodes, int max_nodes) {
    JoinRequest join = MakeJoin("run", std::to_string(id), min_nodes, max_nodes);
    join.timeouts.preflight.enabled = true;
    join.node.preflight_port = 4000 + id;
    proto::etcd::NodeRecord r;
    *r.mutable_join() = ToProto(join.node, join.timeouts);
    r.set_peer_host("10.0.0." + std::to_string(id));
    c.OnEvent(store_.Put(keys_.node(std::to_string(id)), r.SerializeAsString()), now_);
  }
  // Node `id` answers the preflight request in its inbox: 10 GFLOP/s, every pair healthy.
  void ReportPreflight(EtcdCoordinator& c, const std::string& id) {
    const std::vector<proto::ServerMessage> inbox = Inbox(store_, keys_, id);
    ASSERT_FALSE(inbox.empty()) << id;
    ASSERT_TRUE(inbox.back().has_preflight()) << id << ": asked to measure, not assigned";
    const proto::PreflightRequest& request = inbox.back().preflight();
    PreflightReport report = {};
    report.generation = request.generation();
    report.cpu_gflops = 10;
    for (const auto& target : request.targets()) {
      EXPECT_EQ(target.addr(), "10.0.0." + target.node_id()) << "where the node's workers listen";
      report.pairs.push_back({target.node_id(), 0.1, 1000, 1000, ""});
    }
    c.OnEvent(store_.Put(keys_.preflight(id), ToProto(report).SerializeAsString()), now_);
  }
  void Write(EtcdCoordinator& c) {
    auto txn = c.PendingWrite();
    ASSERT_TRUE(txn.has_value());
    ASSERT_EQ(txn->compare_size(), 1);
    EXPECT_EQ(txn->compare(0).key(), keys_.coordinator());
    store_.Apply(*txn);
    c.WriteConfirmed();
    EXPECT_FALSE(c.PendingWrite().has_value());
  }

  FakeStore store_;
  EtcdKeys keys_{"/p", "run"};
  TimePoint now_{std::chrono::seconds(100)};
};

TEST_F(EtcdCoordinatorTest, JoinsFormARoundWrittenToEachInbox) {
  EtcdCoordinator c(keys_, "1", "1/7", 7);
  c.Rebuild(store_.All(), store_.revision(), now_);
  JoinNode(c, "1", 2, 2);
  JoinNode(c, "2", 2, 2);
  Write(c);
  for (const std::string id : {"1", "2"}) {
    auto msgs = Inbox(store_, keys_, id);
    ASSERT_FALSE(msgs.empty()) << id;
    ASSERT_TRUE(msgs.back().has_assignment()) << id;
    EXPECT_EQ(msgs.back().assignment().round(), 1);
    EXPECT_EQ(msgs.back().assignment().group_world_size(), 2);
  }
  EXPECT_EQ(Inbox(store_, keys_, "1").back().assignment().group_rank(), 0);
  EXPECT_EQ(Inbox(store_, keys_, "2").back().assignment().group_rank(), 1);
}

TEST_F(EtcdCoordinatorTest, NewCoordinatorContinuesTheRunAndLosesTheDeadOne) {
  EtcdCoordinator first(keys_, "1", "1/7", 7);
  first.Rebuild(store_.All(), store_.revision(), now_);
  for (const std::string id : {"1", "2", "3"}) JoinNode(first, id, 2, 3);
  Write(first);
  // Node 1, the coordinator, dies: its keys go with its lease. Node 2 takes over.
  store_.Delete(keys_.node("1"));
  EtcdCoordinator second(keys_, "2", "2/8", 8);
  second.Rebuild(store_.All(), store_.revision(), now_);
  Write(second);
  // A failure: survivors restarted (round 1 over), a new round of 2 formed (last call is 2 s).
  auto msgs2 = Inbox(store_, keys_, "2");
  ASSERT_GE(msgs2.size(), 1u);
  EXPECT_TRUE(msgs2[0].has_restart());
  EXPECT_EQ(msgs2[0].restart().round(), 1);
  EXPECT_NE(msgs2[0].restart().reason().find("node 1 was lost"), std::string::npos);
  now_ += std::chrono::seconds(3);
  second.Tick(now_);
  Write(second);
  auto a2 = Inbox(store_, keys_, "2"), a3 = Inbox(store_, keys_, "3");
  ASSERT_TRUE(a2.back().has_assignment());
  ASSERT_TRUE(a3.back().has_assignment());
  EXPECT_EQ(a2.back().assignment().round(), 2);
  EXPECT_EQ(a2.back().assignment().restart_count(), 1) << "the loss spent the budget once";
  // Survivors keep their order: 2 had rank 1 and 3 rank 2; now 0 and 1.
  EXPECT_EQ(a2.back().assignment().group_rank(), 0);
  EXPECT_EQ(a3.back().assignment().group_rank(), 1);
}

// Issue 40: the spare is a spare in the state record; when the coordinator (a member) dies, the
// next coordinator takes the spare into its rank at once, the survivor keeps its own, and the
// restart says a spare was used.
TEST_F(EtcdCoordinatorTest, ASpareStaysASpareAcrossACoordinatorChangeAndTakesTheLostRank) {
  EtcdCoordinator first(keys_, "1", "1/7", 7);
  first.Rebuild(store_.All(), store_.revision(), now_);
  for (const std::string id : {"1", "2", "3"}) JoinNode(first, id, 2, 2);
  Write(first);
  ASSERT_TRUE(Inbox(store_, keys_, "3").back().has_standby());
  EXPECT_EQ(Inbox(store_, keys_, "3").back().standby().members(), 2);
  store_.Delete(keys_.node("1"));  // the coordinator, group rank 0, dies
  EtcdCoordinator second(keys_, "2", "2/8", 8);
  second.Rebuild(store_.All(), store_.revision(), now_);
  Write(second);
  auto m2 = Inbox(store_, keys_, "2"), m3 = Inbox(store_, keys_, "3");
  ASSERT_TRUE(m2[0].has_restart());
  EXPECT_TRUE(m2[0].restart().spare_used());
  ASSERT_TRUE(m2.back().has_assignment());
  ASSERT_TRUE(m3.back().has_assignment());
  EXPECT_EQ(m2.back().assignment().group_rank(), 1);
  EXPECT_EQ(m3.back().assignment().group_rank(), 0);
  proto::etcd::RunSnapshotRecord state;
  ASSERT_TRUE(state.ParseFromString(store_.value(keys_.state())));
  EXPECT_EQ(state.spares_used(), 1);
}

TEST_F(EtcdCoordinatorTest, NewCoordinatorAppliesStatusWrittenAfterTheLastState) {
  EtcdCoordinator first(keys_, "1", "1/7", 7);
  first.Rebuild(store_.All(), store_.revision(), now_);
  JoinNode(first, "1", 2, 2);
  JoinNode(first, "2", 2, 2);
  Write(first);
  // Node 1 succeeds and is closed; then node 2 reports success while nobody coordinates.
  proto::etcd::AgentRecord ok;
  ok.mutable_group_status()->set_round(1);
  ok.mutable_group_status()->set_state(proto::GroupStatus::SUCCEEDED);
  first.OnEvent(store_.Put(keys_.status("1"), ok.SerializeAsString()), now_);
  Write(first);
  EXPECT_TRUE(Inbox(store_, keys_, "1").back().has_close());
  store_.Put(keys_.status("2"), ok.SerializeAsString());
  store_.Delete(keys_.node("1"));  // node 1 leaves (its lease revoked)
  EtcdCoordinator second(keys_, "2", "2/8", 8);
  second.Rebuild(store_.All(), store_.revision(), now_);
  Write(second);
  auto msgs = Inbox(store_, keys_, "2");
  ASSERT_TRUE(msgs.back().has_close());
  EXPECT_EQ(msgs.back().close().code(), 0);
  EXPECT_TRUE(second.run_closed());
  EXPECT_EQ(store_.value(keys_.closed()), "1");
}

// The figures agents put at their figures/ keys (issue 41): compute times reach the run's
// slow-node judge, whose verdict goes to the coordinator's log, and save times the checkpoint
// advice, written to the run's advice key with the next write, and again only when it moved.
// What the judges make of it goes to the report key (`ddprun status` reads it), under the
// coordinator's lease, at most every 5 s; neither rewrites the run's durable state.
TEST_F(EtcdCoordinatorTest, FiguresReachTheJudgeAndTheAdviceGoesToTheAdviceKey) {
  EtcdCoordinator c(keys_, "1", "1/7", 7);
  c.Rebuild(store_.All(), store_.revision(), now_);
  for (const std::string id : {"1", "2", "3"}) JoinNode(c, id, 3, 3);
  Write(c);
  // The keys the write after a tick puts, and the lease of its report.
  auto written = [&](int64_t* report_lease = nullptr) {
    c.Tick(now_);
    std::optional<etcdserverpb::TxnRequest> txn = c.PendingWrite();
    std::vector<std::string> keys;
    if (!txn.has_value()) return keys;
    for (const auto& op : txn->success()) {
      keys.push_back(op.request_put().key());
      if (op.request_put().key() == keys_.report() && report_lease != nullptr) {
        *report_lease = op.request_put().lease();
      }
    }
    store_.Apply(*txn);
    c.WriteConfirmed();
    return keys;
  };
  auto report_figures = [&] {
    for (int node = 1; node <= 3; ++node) {
      NodeFigures figures;
      figures.compute = {{node - 1, node == 3 ? 90.0 : 30.0, 100}};
      c.OnEvent(
          store_.Put(keys_.figures(std::to_string(node)), ToProto(figures).SerializeAsString()),
          now_);
    }
  };
  for (int report = 0; report < 3; ++report) {
    now_ += std::chrono::seconds(5);
    report_figures();
    int64_t lease = 0;
    EXPECT_THAT(written(&lease), ::testing::ElementsAre(keys_.report()))
        << "figures change no durable state: the report alone, once per 5 s";
    EXPECT_EQ(lease, 7);
  }
  now_ += std::chrono::seconds(5);
  report_figures();
  EXPECT_THAT(written(), ::testing::IsEmpty()) << "the same standings: the report is unchanged";
  const std::vector<EtcdCoordinator::LogLine> log = c.TakeLog();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_TRUE(log[0].warning);
  EXPECT_EQ(log[0].text.rfind("run 'run': node 3 is slow: ", 0), 0u) << log[0].text;
  EXPECT_TRUE(c.TakeLog().empty());
  proto::etcd::JudgesReport judged;
  ASSERT_TRUE(judged.ParseFromString(store_.value(keys_.report())));
  ASSERT_EQ(judged.members_size(), 3) << judged.DebugString();
  for (const proto::Member& m : judged.members()) {
    EXPECT_EQ(m.slow(), m.node_id() == "3") << judged.DebugString();
    EXPECT_DOUBLE_EQ(m.compute_ms(), m.node_id() == "3" ? 90.0 : 30.0);
  }
  EXPECT_FALSE(judged.has_checkpoint_advice()) << "no save time yet";

  now_ += std::chrono::seconds(60);
  NodeFigures saved;
  saved.checkpoint.save_s = 2;
  const std::string figures = ToProto(saved).SerializeAsString();
  c.OnEvent(store_.Put(keys_.figures("2"), figures), now_);
  EXPECT_THAT(written(), ::testing::UnorderedElementsAre(keys_.advice(), keys_.report()));
  const double advised = std::stod(store_.value(keys_.advice()));
  EXPECT_GT(advised, 0);
  ASSERT_TRUE(judged.ParseFromString(store_.value(keys_.report())));
  EXPECT_NEAR(judged.checkpoint_advice().interval_s(), advised, 0.001);
  EXPECT_DOUBLE_EQ(judged.checkpoint_advice().save_s(), 2);
  c.OnEvent(store_.Put(keys_.figures("2"), figures), now_);
  EXPECT_THAT(written(), ::testing::IsEmpty()) << "the same advice is not written again";
  now_ += std::chrono::seconds(1);  // a little more trained: the interval moves under 5 %
  c.OnEvent(store_.Put(keys_.figures("2"), figures), now_);
  EXPECT_THAT(written(), ::testing::IsEmpty()) << "nor one that barely moved, within 5 s";
  ASSERT_TRUE(c.NextDeadline().has_value());
  EXPECT_LE(*c.NextDeadline(), now_ + std::chrono::seconds(4)) << "the report due then";
  now_ += std::chrono::seconds(600);  // much more trained: a longer MTBF, a longer interval
  c.OnEvent(store_.Put(keys_.figures("2"), figures), now_);
  EXPECT_THAT(written(), ::testing::UnorderedElementsAre(keys_.advice(), keys_.report()));
  EXPECT_GT(std::stod(store_.value(keys_.advice())), 1.05 * advised);
}

// The preflight on etcd (issue 41): the round waits while the coordinator's RunState asks each
// node, in its inbox, to measure; the reports at the nodes' preflight/ keys let it form, and the
// verdicts go to the coordinator's log, a line a node.
TEST_F(EtcdCoordinatorTest, ThePreflightAsksInTheInboxesAndTheReportsFormTheRound) {
  EtcdCoordinator c(keys_, "1", "1/7", 7);
  c.Rebuild(store_.All(), store_.revision(), now_);
  for (int node = 1; node <= 3; ++node) JoinNodeWithPreflight(c, node, 3, 3);
  Write(c);
  now_ += std::chrono::seconds(2);
  for (const std::string id : {"1", "2", "3"}) ASSERT_NO_FATAL_FAILURE(ReportPreflight(c, id));
  Write(c);
  for (const std::string id : {"1", "2", "3"}) {
    ASSERT_TRUE(Inbox(store_, keys_, id).back().has_assignment()) << id;
  }
  int lines = 0;
  for (const EtcdCoordinator::LogLine& line : c.TakeLog()) {
    if (line.text.find("': preflight: node ") != std::string::npos) ++lines;
  }
  EXPECT_EQ(lines, 3);
}

// A coordinator that takes over a run past its first round rebuilds it from the nodes' keys,
// joining them into a fresh state as at the start: with as many nodes as the round's seats (the
// survivors and a spare) that must not start a second preflight (the agents' probe listeners
// are closed: nobody would report, the round would wait for the deadline and then keep nodes
// out for it). The spare takes the lost rank at once.
TEST_F(EtcdCoordinatorTest, ANewCoordinatorPastTheFirstRoundRunsNoPreflight) {
  EtcdCoordinator first(keys_, "1", "1/7", 7);
  first.Rebuild(store_.All(), store_.revision(), now_);
  for (int node = 1; node <= 4; ++node) JoinNodeWithPreflight(first, node, 3, 3);
  Write(first);
  for (const std::string id : {"1", "2", "3", "4"}) {
    ASSERT_NO_FATAL_FAILURE(ReportPreflight(first, id));
  }
  Write(first);
  ASSERT_TRUE(Inbox(store_, keys_, "2").back().has_assignment());
  ASSERT_TRUE(Inbox(store_, keys_, "4").back().has_standby()) << "node 4 waits as a spare";
  (void)first.TakeLog();
  store_.Delete(keys_.node("1"));  // the coordinator's node is lost with its lease
  EtcdCoordinator second(keys_, "2", "2/8", 8);
  second.Rebuild(store_.All(), store_.revision(), now_);
  Write(second);
  for (const std::string id : {"2", "3", "4"}) {
    const std::vector<proto::ServerMessage> inbox = Inbox(store_, keys_, id);
    ASSERT_TRUE(inbox.back().has_assignment()) << id << ": " << inbox.back().DebugString();
    EXPECT_EQ(inbox.back().assignment().round(), 2) << id;
  }
  for (const EtcdCoordinator::LogLine& line : second.TakeLog()) {
    EXPECT_EQ(line.text.find("preflight"), std::string::npos) << line.text;
  }
}

TEST_F(EtcdCoordinatorTest, StateOfAnEarlierJobWhoseAgentsAllDiedIsIgnored) {
  EtcdCoordinator old(keys_, "1", "1/7", 7);
  old.Rebuild(store_.All(), store_.revision(), now_);
  JoinNode(old, "1", 2, 2);
  JoinNode(old, "2", 2, 2);
  Write(old);
  proto::etcd::AgentRecord failed;
  failed.mutable_group_status()->set_round(1);
  failed.mutable_group_status()->set_state(proto::GroupStatus::FAILED);
  old.OnEvent(store_.Put(keys_.status("2"), failed.SerializeAsString()), now_);
  Write(old);
  store_.Put(keys_.closed(), "1");
  store_.Delete(keys_.node("1"));  // every agent of that job died
  store_.Delete(keys_.node("2"));
  // A new job with the same run id: its agents 3 and 4 join.
  store_.Put(keys_.node("3"), NodeValue("3", 2, 2));
  EtcdCoordinator c(keys_, "3", "3/9", 9);
  c.Rebuild(store_.All(), store_.revision(), now_);
  JoinNode(c, "4", 2, 2);
  Write(c);
  auto msgs = Inbox(store_, keys_, "3");
  ASSERT_TRUE(msgs.back().has_assignment());
  EXPECT_EQ(msgs.back().assignment().round(), 1);
  EXPECT_EQ(msgs.back().assignment().restart_count(), 0) << "no budget inherited";
  EXPECT_FALSE(store_.has(keys_.closed()));
}

TEST_F(EtcdCoordinatorTest, EventsBeforeTheRebuildRevisionAreIgnored) {
  const mvccpb::Event early = store_.Put(keys_.node("1"), NodeValue("1", 1, 2));
  EtcdCoordinator c(keys_, "1", "1/7", 7);
  c.Rebuild(store_.All(), store_.revision(), now_);
  Write(c);
  c.OnEvent(early, now_);  // a watch that started earlier delivers it again
  EXPECT_FALSE(c.PendingWrite().has_value());
}

class EtcdCoordinatorLivenessTest : public EtcdCoordinatorTest {
 protected:
  // Nodes 1 (the coordinator), 2 and 3 of a fixed world of 2 with liveness=auto: 1 and 2 train,
  // 3 stands ready as a spare.
  void StartWithASpare(EtcdCoordinator& c) {
    c.Rebuild(store_.All(), store_.revision(), now_);
    for (const std::string id : {"1", "2", "3"}) {
      c.OnEvent(store_.Put(keys_.node(id), NodeValueWithLiveness(id, 2, 2)), now_);
    }
    Write(c);
  }
  uint32_t IndexOf(const std::string& id) {
    for (const mvccpb::KeyValue& kv : store_.All()) {
      if (kv.key() == keys_.node(id)) return static_cast<uint32_t>(kv.create_revision());
    }
    return 0;
  }
  static std::optional<EtcdCoordinator::WatchedNode> Watched(const EtcdCoordinator& c,
                                                             uint32_t index) {
    for (const auto& w : c.LivenessWatches()) {
      if (w.index == index) return w;
    }
    return std::nullopt;
  }
};

TEST_F(EtcdCoordinatorLivenessTest, EveryNodeButTheCoordinatorIsHeardAndAMemberJudgedBySilence) {
  EtcdCoordinator c(keys_, "1", "1/7", 7);
  EXPECT_FALSE(c.liveness().has_value()) << "no run yet";
  StartWithASpare(c);
  ASSERT_TRUE(c.liveness().has_value());
  EXPECT_EQ(c.liveness()->mode, LivenessMode::kAuto);
  EXPECT_EQ(c.LivenessWatches().size(), 2u);
  EXPECT_FALSE(Watched(c, IndexOf("1")).has_value()) << "the coordinator's own silence is its "
                                                        "lease's to find";
  const auto member = Watched(c, IndexOf("2"));
  const auto spare = Watched(c, IndexOf("3"));
  ASSERT_TRUE(member.has_value());
  ASSERT_TRUE(spare.has_value());
  EXPECT_EQ(member->verdict, SilenceVerdict::kBySilence) << "a spare stands ready";
  EXPECT_EQ(spare->verdict, SilenceVerdict::kByLease);
  EXPECT_EQ(c.SilenceVerdictOf(member->conn), SilenceVerdict::kBySilence);
}

TEST_F(EtcdCoordinatorLivenessTest, ASilentMemberIsClosedAndTheSpareTakesItsGroupRank) {
  EtcdCoordinator c(keys_, "1", "1/7", 7);
  StartWithASpare(c);
  const int rank = Inbox(store_, keys_, "2").back().assignment().group_rank();
  const auto member = Watched(c, IndexOf("2"));
  ASSERT_TRUE(member.has_value());
  EXPECT_EQ(c.Silent(member->conn, std::chrono::milliseconds(260), now_), "2");
  Write(c);
  const auto lost = Inbox(store_, keys_, "2");
  ASSERT_TRUE(lost.back().has_close());
  EXPECT_TRUE(lost.back().close().given_up());
  const auto spare = Inbox(store_, keys_, "3");
  ASSERT_TRUE(spare.back().has_assignment());
  EXPECT_EQ(spare.back().assignment().round(), 2);
  EXPECT_EQ(spare.back().assignment().group_rank(), rank);
  EXPECT_FALSE(Watched(c, IndexOf("2")).has_value()) << "a closed node is heard no more";
  EXPECT_EQ(c.Silent(member->conn, std::chrono::milliseconds(300), now_), "")
      << "a node lost once is not lost again";
}

TEST_F(EtcdCoordinatorLivenessTest, TheLivenessRecordIsWrittenUnderTheGivenLease) {
  EtcdCoordinator c(keys_, "1", "1/7", 7);
  StartWithASpare(c);
  c.PublishLiveness("record", 77);
  auto txn = c.PendingWrite();
  ASSERT_TRUE(txn.has_value());
  bool written = false;
  for (const auto& op : txn->success()) {
    if (op.has_request_put() && op.request_put().key() == keys_.liveness()) {
      written = true;
      EXPECT_EQ(op.request_put().value(), "record");
      EXPECT_EQ(op.request_put().lease(), 77);
    }
  }
  EXPECT_TRUE(written);
  Write(c);
  EXPECT_EQ(store_.value(keys_.liveness()), "record");
}

}  // namespace
}  // namespace ddprun::rendezvous
