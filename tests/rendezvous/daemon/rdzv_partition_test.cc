// Issue 43 S2 on hosts made from network namespaces (tests/testing/net_hosts.h), with real ddprun
// agents on hosts 2-4 (host 2's hosts the rendezvous) and rdzv-test-agent --formerly as a token
// holder's forged join:
// - host 2 cut off, and a token holder on host 2 joins its server claiming to be host 3's agent
//   back under a new id (formerly_node_id without that member's key). The majority rule
//   (rendezvous/core/last_round_majority.h) must not count it: the cut-off side forms no round
//   while hosts 3 and 4 fail over and train, so two worlds never train the same job. The forger
//   joins once host 2's server has given up hosts 3 and 4, so that only the claim is tested;
// - a plain newcomer joining host 2's server at the cut, while hosts 3 and 4 are still within
//   their leases: it fills the restart round up to --nnodes' maximum with the one still within
//   its lease, and before the rule counted unconfirmed rounds (joint consensus,
//   last_round_majority.h) host 2's side then went on as a majority of that round, in rounds
//   of 3 and then 2, beside hosts 3 and 4;
// - a refused join claiming to be the host must not rename the host: the survivors of the
//   host's death would then walk to its dead address first, a lease late.
// Started by the tests as root; without root the cases are skipped with the reason, as the other
// multi-host tests are.
#include <signal.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/net_hosts.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::CountMatches;
using ::testing::HasSubstr;
using testing::NetHosts;
using ::testing::Not;
using testing::Subprocess;
using testing::WaitUntil;
using namespace std::chrono_literals;

constexpr char kToken[] = "s2-partition-token";
constexpr char kRun[] = "s2";
// keep_alive_interval=1 x keep_alive_max_attempt=3.
constexpr double kLeaseSeconds = 3.0;

class ForgedFormerIdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = NetHosts::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    hosts_ = std::make_unique<NetHosts>(4);
    ASSERT_EQ(hosts_->error(), "");
  }

  std::string Endpoint() const { return hosts_->Address(2) + ":29400"; }
  std::map<std::string, std::string> Env() const { return {{"DDPRUN_RDZV_TOKEN", kToken}}; }

  // An elastic agent of the job (--nnodes=1:3, a 3 s lease); host 2's hosts the rendezvous.
  std::unique_ptr<Subprocess> Agent(int host) {
    return std::make_unique<Subprocess>(
        hosts_->On(host, {BinPath("ddprun"), "--rdzv-backend=c10d", "--rdzv-endpoint=" + Endpoint(),
                          std::string("--rdzv-id=") + kRun, "--nnodes=1:3", "--nproc-per-node=1",
                          "--max-restarts=3",
                          "--rdzv-conf=keep_alive_interval=1,keep_alive_max_attempt=3,"
                          "last_call_timeout=0.2",
                          "--no-python", Worker()}),
        Env());
  }

  // A token holder on host 2 joining as `node_id`, claiming to be `former` back under a new id
  // (without its member key: it never had it).
  std::unique_ptr<Subprocess> Forger(const std::string& node_id, const std::string& nnodes,
                                     const std::string& former) {
    return std::make_unique<Subprocess>(
        hosts_->On(2, {BinPath("rdzv-test-agent"), "--endpoint", Endpoint(), "--run", kRun,
                       "--node", node_id, "--nnodes", nnodes, "--nproc", "1", "--max-restarts", "3",
                       "--keep-alive", "1", "--keep-alive-attempts", "3", "--formerly", former}),
        Env());
  }

  // The node id of `host`'s agent (its host name, pid and a random suffix), from the run's
  // status; "" when it is not a member within 30 s.
  std::string NodeIdOf(int host) {
    const std::regex id("\"(" + hosts_->Name(host) + "_[0-9]+_[0-9a-f]+)\"");
    std::string found;
    WaitUntil(
        [&] {
          const std::string out = StatusOnHost2();
          std::smatch m;
          if (std::regex_search(out, m, id)) found = m[1];
          return !found.empty();
        },
        30s);
    return found;
  }

  // Logs "host=H rank=R restart=N world=W" into DIR/log and runs until DIR/done exists.
  std::string Worker() {
    const std::string path = dir_.File("worker.sh");
    testing::WriteFile(path,
                       "#!/bin/sh\n"
                       "echo \"host=$(hostname) rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT "
                       "world=$WORLD_SIZE\" >> " +
                           dir_.File("log") + "\nwhile [ ! -e " + dir_.File("done") +
                           " ]; do sleep 0.05; done\n",
                       0755);
    return path;
  }
  std::string Log() const { return testing::ReadFile(dir_.File("log")); }

  // `ddprun status --json` of the run, asked on host 2 (its own server even while it is cut
  // off); "" when that fails.
  std::string StatusOnHost2() {
    Subprocess status(hosts_->On(2, {BinPath("ddprun"), "status", std::string("--rdzv-id=") + kRun,
                                     "--rdzv-endpoint=" + Endpoint(), "--json"}),
                      Env());
    if (!status.Wait(10s).has_value()) return "";
    return status.out();
  }

  std::string AllErr() {
    std::string all;
    for (const auto& a : agents_) {
      if (a != nullptr) all += a->err();
    }
    return all;
  }

  // Host 2's agent hosting the rendezvous, then hosts 3 and 4's: a world of three running.
  // With `refused_claim_to_be_the_host`, before hosts 3 and 4 start, a token holder on host 2
  // sends a join claiming to be the host's agent back under a new id, which the run refuses
  // (other --nnodes).
  void StartTheJob(bool refused_claim_to_be_the_host = false) {
    agents_.push_back(Agent(2));
    ASSERT_TRUE(agents_[0]->WaitForOutputContains("hosting the rendezvous", 30s))
        << agents_[0]->err();
    if (refused_claim_to_be_the_host) {
      const std::string host_id = NodeIdOf(2);
      ASSERT_NE(host_id, "") << agents_[0]->err();
      std::unique_ptr<Subprocess> refused = Forger("forger-rename", "5:5", host_id);
      std::optional<testing::ExitStatus> st = refused->Wait(30s);
      ASSERT_TRUE(st.has_value());
      EXPECT_EQ(st->exit_code, 3) << refused->out() << refused->err();
      EXPECT_THAT(refused->out(), HasSubstr("CLOSED code=INVALID_ARGUMENT"));
    }
    agents_.push_back(Agent(3));
    agents_.push_back(Agent(4));
    ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "restart=0 world=3") == 3; }, 60s))
        << Log() << AllErr();
  }

  testing::TempDir dir_;
  std::unique_ptr<NetHosts> hosts_;
  std::vector<std::unique_ptr<Subprocess>> agents_;  // hosts 2, 3, 4
};

TEST_F(ForgedFormerIdTest, AClaimToBeAMemberOfTheOtherSideDoesNotMakeTheCutOffSideAMajority) {
  StartTheJob();
  if (HasFatalFailure()) return;
  const std::string former = NodeIdOf(3);
  ASSERT_NE(former, "") << AllErr();

  // Host 2 (the hosting agent) cut off. Once its server has given up hosts 3 and 4 (it holds 1
  // of round 2's 3 members and forms no round), a token holder on host 2 joins it claiming to
  // be host 3's agent back under a new id. Believed, it made host 2's side 2 of 3: a round of
  // two there (host 2's worker and the forger) while hosts 3 and 4 train a world of two.
  const auto cut = std::chrono::steady_clock::now();
  hosts_->Cut(2);
  auto since_cut = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  };
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(StatusOnHost2(), "\"group_rank\"") == 1; }, 30s))
      << StatusOnHost2() << AllErr();
  std::unique_ptr<Subprocess> forger = Forger("forger", "1:3", former);
  const std::string cut_side_round = "host=n2 [^\\n]*restart=[1-9]";
  const std::string majority_round = "host=n[34] [^\\n]*restart=1 world=2";
  std::optional<double> survivors;
  // The forger joined and was not counted (the server says so), the survivors' world of two
  // runs, and the cut-off side's last call (0.2 s) is long past.
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (!survivors && CountMatches(Log(), majority_round) == 2) survivors = since_cut();
        return survivors && since_cut() > *survivors + 1 &&
               CountMatches(StatusOnHost2(), "\"group_rank\"") == 2;
      },
      30s))
      << "the majority (hosts 3 and 4) did not run a world of two within 30 s of the cut, or the "
         "forger did not join host 2's server:\n"
      << Log() << AllErr() << forger->out();
  std::this_thread::sleep_for(1s);  // the cut-off side's last call (0.2 s), with slack
  std::cout << "host 2 cut off with a forger claiming to be host 3: the majority ran a world of "
               "two after "
            << *survivors << " s (lease " << kLeaseSeconds << " s)" << std::endl;
  EXPECT_EQ(CountMatches(Log(), cut_side_round), 0)
      << "the cut-off side formed a round on a forged claim (two worlds):\n"
      << Log();
  EXPECT_THAT(forger->out(), Not(HasSubstr("ASSIGNMENT"))) << forger->out();
  EXPECT_THAT(agents_[0]->err(),
              HasSubstr("ignored a claim to be formerly node '" + former + "' without"));
  for (int host : {3, 4}) {
    EXPECT_TRUE(agents_[host - 2]->running()) << agents_[host - 2]->err();
  }

  // The job heals into one world of three: host 2's agent stops hosting and joins the majority.
  forger->Signal(SIGTERM);
  forger->Wait(10s);
  hosts_->Heal(2);
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "restart=[1-9] world=3") == 3; }, 40s))
      << Log() << AllErr();
  EXPECT_THAT(agents_[0]->err(), HasSubstr("this agent stops hosting and joins there"));
  testing::WriteFile(dir_.File("done"), "");
  ASSERT_TRUE(testing::ExpectAllExit(agents_, 0, 30s)) << Log() << AllErr();
}

// A newcomer at the cut (no claim at all). Host 2's server gives up hosts 3 and 4 one tick
// apart; at the first, the other is still within its lease and the newcomer fills a round of
// three with it, a round it never hears of. That round cannot train (its silent member never
// starts), and it must not become the reference that makes host 2 and the newcomer 2 of 3:
// hosts 3 and 4 are 2 of the round before, with their successor.
TEST_F(ForgedFormerIdTest, ANewcomerAtTheCutDoesNotMakeTheCutOffSideAMajority) {
  StartTheJob();
  if (HasFatalFailure()) return;
  const auto cut = std::chrono::steady_clock::now();
  hosts_->Cut(2);
  std::unique_ptr<Subprocess> newcomer = Forger("newcomer", "1:3", "");
  auto since_cut = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  };
  const std::string majority_round = "host=n[34] [^\\n]*restart=1 world=2";
  std::optional<double> survivors;
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (!survivors && CountMatches(Log(), majority_round) == 2) survivors = since_cut();
        return survivors.has_value();
      },
      30s))
      << Log() << AllErr() << newcomer->out();
  // Both leases on host 2's side are over a lease after the cut; then two more for any round
  // that side would form.
  WaitUntil([&] { return since_cut() > 3 * kLeaseSeconds; }, 30s);
  std::cout << "host 2 cut off with a newcomer joining it: the majority ran a world of two after "
            << *survivors << " s (lease " << kLeaseSeconds << " s)" << std::endl;
  // Host 2's side: no world smaller than the job's three (one would be a second world), and
  // none the newcomer was told of.
  EXPECT_EQ(CountMatches(Log(), "host=n2 [^\\n]*world=[12]\\b"), 0)
      << "the cut-off side ran a second world:\n"
      << Log();
  EXPECT_EQ(CountMatches(newcomer->out(), "group_world_size=[12]\\b"), 0) << newcomer->out();
  for (int host : {3, 4}) {
    EXPECT_TRUE(agents_[host - 2]->running()) << agents_[host - 2]->err();
  }
  newcomer->Signal(SIGTERM);
  newcomer->Wait(10s);
  // The heal: one world of three again (host 2's side may have started a worker for the round
  // of three that could not train: counted from here).
  const int before = CountMatches(Log(), "restart=[1-9] world=3");
  hosts_->Heal(2);
  ASSERT_TRUE(
      WaitUntil([&] { return CountMatches(Log(), "restart=[1-9] world=3") >= before + 3; }, 40s))
      << Log() << AllErr();
  // Found among the members of round 1: round 2, the last host 2 knows, lacks the successor.
  EXPECT_THAT(agents_[0]->err(), HasSubstr("this agent stops hosting and joins there"));
  testing::WriteFile(dir_.File("done"), "");
  ASSERT_TRUE(testing::ExpectAllExit(agents_, 0, 30s)) << Log() << AllErr();
}

// Before hosts 3 and 4 join, a token holder's join claiming to be the host back under a new id
// is refused (other --nnodes). Applied before the join was checked, the rename reached every
// agent with its assignment: when the host's agent died the survivors no longer knew it as the
// host, walked to its dead address as if it were its own successor and waited for it to
// re-register, a lease each (or gave up, exit 3), instead of failing over at once.
TEST_F(ForgedFormerIdTest, ARefusedClaimToBeTheHostLeavesItsFailoverAsItWas) {
  StartTheJob(/*refused_claim_to_be_the_host=*/true);
  if (HasFatalFailure()) return;
  const auto killed = std::chrono::steady_clock::now();
  agents_[0]->Signal(SIGKILL);
  agents_[0]->Wait(10s);
  const std::string majority_round = "host=n[34] [^\\n]*restart=1 world=2";
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), majority_round) == 2; }, 30s))
      << Log() << AllErr();
  const double failover =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::cout << "host 2's agent killed after a refused claim to be it: hosts 3 and 4 ran a world "
               "of two after "
            << failover << " s (lease " << kLeaseSeconds << " s)" << std::endl;
  // Its address refuses connections: the survivors need no lease to know it is gone.
  EXPECT_LT(failover, kLeaseSeconds - 1) << AllErr();
  testing::WriteFile(dir_.File("done"), "");
  std::vector<std::unique_ptr<Subprocess>> survivors;
  survivors.push_back(std::move(agents_[1]));
  survivors.push_back(std::move(agents_[2]));
  ASSERT_TRUE(testing::ExpectAllExit(survivors, 0, 30s)) << Log();
}

}  // namespace
}  // namespace ddprun
