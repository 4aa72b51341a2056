// The etcd v3 rendezvous against a real 3-member etcd cluster on loopback: failures of the
// cluster itself (its leader killed, all of it gone), of the agent that coordinates the run, and
// etcd authentication. The agent-level behaviours shared with the built-in server run in
// elastic_test.cc against both backends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "tests/testing/etcd_cluster.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::CountMatches;
using testing::EtcdCluster;
using testing::EtcdClusterTls;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteFile;
using namespace std::chrono_literals;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = EtcdCluster::Unavailable(); !why.empty()) GTEST_SKIP() << why;
    cluster_ = std::make_unique<EtcdCluster>(3);
    ASSERT_TRUE(cluster_->WaitHealthy(20s)) << cluster_->log(0);
    endpoints_ = cluster_->endpoints();
  }

  // A worker that logs its world, writes its pid, then runs `then` (shell).
  std::string Worker(const std::string& then) {
    const std::string path = dir_.File("w.sh");
    // The pid file is complete (written, then renamed) before the log line that tests wait
    // for, so a test that saw the line can read the pid.
    const std::string pid = dir_.File("pid-$RANK-$DDPRUN_ROUND");
    WriteFile(
        path,
        "#!/bin/sh\necho $$ > " + pid + ".tmp && mv " + pid + ".tmp " + pid +
            "\necho \"world=$WORLD_SIZE rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT\" >> " +
            dir_.File("log") + "\n" + then + "\n",
        0755);
    return path;
  }

  std::unique_ptr<Subprocess> Agent(const std::vector<std::string>& flags,
                                    const std::string& worker, const std::string& conf = "",
                                    std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {testing::BinPath("ddprun"), "--rdzv-backend=etcd",
                                     "--rdzv-endpoint=" + endpoints_,
                                     "--rdzv-conf=etcd_prefix=/etcd-test,keep_alive_interval=0.5,"
                                     "keep_alive_max_attempt=3" +
                                         conf};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--no-python");
    argv.push_back(worker);
    return std::make_unique<Subprocess>(argv, env);
  }

  std::string Log() const { return ReadFile(dir_.File("log")); }
  int Pid(int rank, int round) const {
    return std::atoi(
        ReadFile(dir_.File("pid-" + std::to_string(rank) + "-" + std::to_string(round))).c_str());
  }
  // Keys left under the test's prefix.
  std::string Keys() { return cluster_->Ctl({"get", "--prefix", "/etcd-test", "--keys-only"}); }

  TempDir dir_;
  std::unique_ptr<EtcdCluster> cluster_;
  std::string endpoints_;
};

TEST_F(EtcdTest, JobRunsAndLeavesNoKeys) {
  const std::string worker = Worker("exit 0");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 3; ++i) {
    agents.push_back(Agent({"--nnodes=3", "--nproc-per-node=2", "--rdzv-id=job"}, worker));
  }
  for (auto& a : agents) {
    auto st = a->Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << a->err();
  }
  EXPECT_EQ(CountMatches(Log(), "world=6 rank=\\d restart=0"), 6) << Log();
  EXPECT_EQ(Keys(), "") << "the last agent of a finished run removes its keys";
}

TEST_F(EtcdTest, LeaderKilledMidRunJobContinuesAndCompletes) {
  // The agents talk to the leader first, so killing it also makes them fail over.
  int leader = -1;
  ASSERT_TRUE(WaitUntil([&] { return (leader = cluster_->Leader()) >= 0; }, 10s));
  endpoints_ = cluster_->endpoint(leader);
  for (int i = 0; i < 3; ++i) {
    if (i != leader) endpoints_ += "," + cluster_->endpoint(i);
  }
  const std::string go = dir_.File("go");
  // Bounded wait (30 s) for the test to say go, then success.
  const std::string worker =
      Worker("i=0; while [ ! -e " + go + " ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(Agent(
        {"--nnodes=2", "--nproc-per-node=1", "--max-restarts=0", "--rdzv-id=leader"}, worker));
  }
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "world=2") == 2; }, 30s)) << Log();
  cluster_->Kill(leader);
  int new_leader = -1;
  ASSERT_TRUE(WaitUntil([&] { return (new_leader = cluster_->Leader()) >= 0; }, 10s));
  EXPECT_NE(new_leader, leader);
  // The cluster commits again (a quorum of two); the agents' lease renewals, status reports and
  // the coordinator's writes from now on go through the surviving members.
  ASSERT_TRUE(WaitUntil([&] { return cluster_->Ctl({"put", "/probe", "x"}) != ""; }, 10s));
  cluster_->Ctl({"del", "/probe"});
  WriteFile(go, "");
  for (auto& a : agents) {
    auto st = a->Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << a->err();
    // (A status report sent while the survivors elect a leader may still fail after its lease
    // on a loaded machine, and is logged; the run does not depend on it. What a dead member
    // must not cost is the leases: the keys below are all cleaned up only when no agent lost
    // its lease waiting on the dead member, which it used to, 1 run in 10.)
  }
  EXPECT_EQ(CountMatches(Log(), "restart=0"), 2) << Log();
  EXPECT_EQ(CountMatches(Log(), "restart=[1-9]"), 0) << "losing an etcd member is no failure";
  EXPECT_EQ(Keys(), "") << agents[0]->err() << agents[1]->err();
}

TEST_F(EtcdTest, KilledCoordinatorAgentIsLostAndSurvivorsRestartUnderANewOne) {
  const std::string worker = Worker("[ \"$WORLD_SIZE\" = 2 ] && exit 0\nsleep 60 & wait $!");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 3; ++i) {
    agents.push_back(
        Agent({"--nnodes=2:3", "--nproc-per-node=1", "--max-restarts=1", "--rdzv-id=coord"}, worker,
              ",last_call_timeout=1"));
  }
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "world=3") == 3; }, 30s)) << Log();
  int coordinator = -1;
  for (int i = 0; i < 3; ++i) {
    if (agents[i]->err().find("now coordinates") != std::string::npos) coordinator = i;
  }
  ASSERT_GE(coordinator, 0);
  const auto killed_at = std::chrono::steady_clock::now();
  agents[coordinator]->Signal(SIGKILL);
  for (int i = 0; i < 3; ++i) {
    if (i == coordinator) continue;
    auto st = agents[i]->Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << agents[i]->err();
    EXPECT_THAT(agents[i]->err(), HasSubstr("was lost"));
  }
  // Lease 2 s (1.5 s rounded up by etcd), then the election, the rebuild and the new round.
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 10s);
  EXPECT_EQ(CountMatches(Log(), "world=2 rank=\\d restart=1"), 2) << Log();
  // The dead agent's workers went with it (the agent's orphan guard).
  for (int rank = 0; rank < 3; ++rank) {
    const int pid = Pid(rank, 1);
    if (pid > 0) {
      EXPECT_TRUE(WaitUntil([&] { return !testing::ProcessAlive(pid); }, 5s)) << pid;
    }
  }
}

TEST_F(EtcdTest, CoordinatorStoppedBySignalLeavesCleanlyWithoutSpendingTheBudget) {
  const std::string worker = Worker("[ \"$WORLD_SIZE\" = 1 ] && exit 0\nsleep 60 & wait $!");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(
        Agent({"--nnodes=1:2", "--nproc-per-node=1", "--max-restarts=0", "--rdzv-id=sigterm"},
              worker, ",last_call_timeout=0.5"));
  }
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "world=2") == 2; }, 30s)) << Log();
  int coordinator = -1;
  for (int i = 0; i < 2; ++i) {
    if (agents[i]->err().find("now coordinates") != std::string::npos) coordinator = i;
  }
  ASSERT_GE(coordinator, 0);
  agents[coordinator]->Signal(SIGTERM);
  auto st = agents[coordinator]->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 128 + SIGTERM) << agents[coordinator]->err();
  // A clean leave is a membership change: the survivor restarts alone, the budget (0) unspent.
  st = agents[1 - coordinator]->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << agents[1 - coordinator]->err();
  EXPECT_THAT(agents[1 - coordinator]->err(), HasSubstr("left"));
  EXPECT_EQ(CountMatches(Log(), "world=1 rank=0 restart=0"), 1) << Log();
  EXPECT_EQ(Keys(), "");
}

TEST_F(EtcdTest, EtcdDownStopsTheWorkersAndExitsThree) {
  const std::string worker = Worker("sleep 60 & wait $!");
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(Agent({"--nnodes=2", "--nproc-per-node=2", "--rdzv-id=down"}, worker));
  }
  ASSERT_TRUE(WaitUntil([&] { return CountMatches(Log(), "world=4") == 4; }, 30s)) << Log();
  std::vector<int> workers;
  for (int rank = 0; rank < 4; ++rank) workers.push_back(Pid(rank, 1));
  const auto down_at = std::chrono::steady_clock::now();
  cluster_->KillAll();
  for (auto& a : agents) {
    auto st = a->Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 3) << a->err();
    EXPECT_THAT(a->err(), HasSubstr("lost the etcd rendezvous"));
  }
  // The lease (2 s) plus the shutdown of the workers.
  EXPECT_LT(std::chrono::steady_clock::now() - down_at, 15s);
  for (int pid : workers) {
    ASSERT_GT(pid, 0);
    EXPECT_FALSE(testing::ProcessAlive(pid)) << pid;
  }
}

TEST_F(EtcdTest, UnreachableClusterAtStartExitsThreeNamingIt) {
  cluster_->KillAll();
  auto a = Agent({"--nnodes=1", "--rdzv-id=nobody"}, Worker("exit 0"), ",read_timeout=1");
  auto st = a->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 3) << a->err();
  EXPECT_THAT(a->err(), HasSubstr(endpoints_));
}

TEST_F(EtcdTest, SignalWhileEtcdIsUnreachableExitsPromptly) {
  cluster_->KillAll();
  auto a = Agent({"--nnodes=1", "--rdzv-id=unreachable"}, Worker("exit 0"), ",read_timeout=60");
  // Joining once the plugin is loaded (the join itself says nothing while it retries).
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ReadFile("/proc/" + std::to_string(a->pid()) + "/maps").find("libddprun_grpc") !=
               std::string::npos;
      },
      10s));
  const auto signalled_at = std::chrono::steady_clock::now();
  a->Signal(SIGTERM);
  auto st = a->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 128 + SIGTERM) << a->err();
  // Not the 60 s read_timeout: the join in progress gives up (an attempt lasts at most 2 s).
  EXPECT_LT(std::chrono::steady_clock::now() - signalled_at, 5s);
}

TEST_F(EtcdTest, UserAndPasswordAuthentication) {
  ASSERT_NE(cluster_->Ctl({"user", "add", "root:s3cret"}), "");
  ASSERT_NE(cluster_->Ctl({"auth", "enable"}), "");
  const std::string worker = Worker("exit 0");
  auto good = Agent({"--nnodes=1", "--rdzv-id=auth"}, worker, ",etcd_user=root",
                    {{"DDPRUN_ETCD_PASSWORD", "s3cret"}});
  auto st = good->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << good->err();

  const std::string password_file = dir_.File("password");
  WriteFile(password_file, "wrong\n", 0600);
  auto bad = Agent({"--nnodes=1", "--rdzv-id=auth2"}, worker,
                   ",etcd_user=root,etcd_password_file=" + password_file);
  st = bad->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 3) << bad->err();
  EXPECT_THAT(bad->err(), HasSubstr("authenticate"));

  auto none = Agent({"--nnodes=1", "--rdzv-id=auth3"}, worker, ",etcd_user=root",
                    {{"DDPRUN_ETCD_PASSWORD", "\x01unset"}});
  st = none->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2) << none->err();
  EXPECT_THAT(none->err(), HasSubstr("DDPRUN_ETCD_PASSWORD"));
}

// Bad etcd settings are configuration errors (exit 2) naming what is wrong, before any etcd call.
TEST(EtcdConfigTest, BadSettingsExitTwoNamingThem) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--rdzv-backend=etcd"}, "needs --rdzv-endpoint"},
      {{"--rdzv-backend=etcd", "--rdzv-endpoint=127.0.0.1:2379", "--rdzv-conf=etcd_prefix=x"},
       "etcd_prefix=x: must start with '/'"},
      {{"--rdzv-backend=etcd", "--rdzv-endpoint=127.0.0.1:2379", "--rdzv-conf=tls_ca=/nonexistent"},
       "/nonexistent"},
      {{"--rdzv-backend=etcd-v3", "--rdzv-endpoint=127.0.0.1:2379,127.0.0.1:0"}, "port"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv = {testing::BinPath("ddprun")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--nnodes=1", "--rdzv-id=bad", "--no-python", "true"});
    Subprocess agent(argv);
    auto st = agent.Wait(30s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << flags.back() << ": " << agent.err();
    EXPECT_THAT(agent.err(), HasSubstr(message)) << flags.back();
  }
}

// A test CA and certificates it signed, made with the openssl command in `dir`: ca.crt,
// server.crt/.key (for localhost and 127.0.0.1) and client.crt/.key. False when openssl is
// missing or fails.
bool MakeTestCertificates(const TempDir& dir) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) return false;
  WriteFile(dir.File("certs.sh"),
            "set -e\ncd \"$(dirname \"$0\")\"\n"
            "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'\n"
            "openssl req -x509 $K -keyout ca.key -out ca.crt -subj /CN=test-ca -days 1\n"
            "openssl req $K -keyout server.key -out server.csr -subj /CN=server\n"
            "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext\n"
            "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 "
            "-extfile server.ext -out server.crt\n"
            "openssl req $K -keyout client.key -out client.csr -subj /CN=client\n"
            "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n"
            "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 "
            "-extfile client.ext -out client.crt\n");
  return std::system(("bash " + dir.File("certs.sh") + " >/dev/null 2>&1").c_str()) == 0;
}

enum class ClientCertificates { kNotRequired, kRequired };

// A one-member cluster's TLS from MakeTestCertificates' files.
EtcdClusterTls ClusterTls(const TempDir& dir, ClientCertificates clients) {
  EtcdClusterTls tls;
  tls.cert = dir.File("server.crt");
  tls.key = dir.File("server.key");
  tls.ca = dir.File("ca.crt");
  if (clients == ClientCertificates::kRequired) {
    tls.client_ca = dir.File("ca.crt");
    tls.client_cert = dir.File("client.crt");
    tls.client_key = dir.File("client.key");
  }
  return tls;
}

// One agent of a one-node etcd job with `conf` appended to its --rdzv-conf; its exit code.
int EtcdAgentExit(const EtcdCluster& cluster, const std::string& backend, const std::string& conf,
                  std::map<std::string, std::string> env, std::string* err) {
  Subprocess agent({testing::BinPath("ddprun"), "--rdzv-backend=" + backend,
                    "--rdzv-endpoint=" + cluster.endpoints(),
                    "--rdzv-conf=etcd_prefix=/tls-test,read_timeout=1" + conf, "--nnodes=1",
                    "--rdzv-id=tls", "--no-python", "true"},
                   std::move(env));
  auto st = agent.Wait(30s);
  *err = agent.err();
  return st.has_value() ? st->exit_code : -1;
}

// TLS through --rdzv-conf tls_ca: a TLS cluster is reached with the CA, and not without it.
TEST(EtcdTlsTest, AgentsReachATlsClusterOnlyWithTls) {
  if (const std::string why = EtcdCluster::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  ASSERT_TRUE(MakeTestCertificates(dir)) << "openssl (Debian package openssl) makes certificates";
  EtcdCluster cluster(1, ClusterTls(dir, ClientCertificates::kNotRequired));
  ASSERT_TRUE(cluster.WaitHealthy(20s)) << cluster.log(0);
  std::string err;
  EXPECT_EQ(EtcdAgentExit(cluster, "etcd", ",tls_ca=" + dir.File("ca.crt"), {}, &err), 0) << err;
  EXPECT_EQ(EtcdAgentExit(cluster, "etcd", "", {}, &err), 3) << err;
}

// A torchrun command line with etcd TLS runs unchanged (issue 24): against a cluster that
// requires client certificates, torchrun's etcd keys (protocol, cacert, cert, key) and its
// etcd-v2 keys (ca_cert, ssl_cert, ssl_cert_key) reach it; without the client certificate, or
// without TLS, the agent cannot. protocol=https with no CA file trusts the default roots, here
// the test CA through $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, and nothing else.
TEST(EtcdTlsTest, TorchrunEtcdTlsSettingsReachAMutualTlsCluster) {
  if (const std::string why = EtcdCluster::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir;
  ASSERT_TRUE(MakeTestCertificates(dir)) << "openssl (Debian package openssl) makes certificates";
  EtcdCluster cluster(1, ClusterTls(dir, ClientCertificates::kRequired));
  ASSERT_TRUE(cluster.WaitHealthy(20s)) << cluster.log(0);
  const std::string client = ",cert=" + dir.File("client.crt") + ",key=" + dir.File("client.key");
  std::string err;
  EXPECT_EQ(EtcdAgentExit(cluster, "etcd", ",protocol=https,cacert=" + dir.File("ca.crt") + client,
                          {}, &err),
            0)
      << err;
  EXPECT_EQ(EtcdAgentExit(cluster, "etcd-v2",
                          ",protocol=https,ca_cert=" + dir.File("ca.crt") + ",ssl_cert=" +
                              dir.File("client.crt") + ",ssl_cert_key=" + dir.File("client.key"),
                          {}, &err),
            0)
      << err;
  EXPECT_EQ(EtcdAgentExit(cluster, "etcd", ",protocol=https" + client,
                          {{"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", dir.File("ca.crt")}}, &err),
            0)
      << err;
  // Refused: the server is not verified by the system's roots; no client certificate; no TLS.
  EXPECT_EQ(EtcdAgentExit(cluster, "etcd", ",protocol=https" + client, {}, &err), 3) << err;
  EXPECT_EQ(
      EtcdAgentExit(cluster, "etcd", ",protocol=https,cacert=" + dir.File("ca.crt"), {}, &err), 3)
      << err;
  EXPECT_EQ(EtcdAgentExit(cluster, "etcd", ",protocol=http", {}, &err), 3) << err;
}

}  // namespace
}  // namespace ddprun
