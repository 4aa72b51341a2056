// The agent's c10d store (launcher/store/, issue 43): with real ddprun and real torch workers.
//  - Worker teardown: under torchrun 2.11 the agent hosts the store, so ranks may exit in any
//    order; the same torch 2.11 script (env:// init, no destroy_process_group) has the same
//    outcome under ddprun. Before, ddprun's rank-0 worker hosted it and the others lost it.
//  - S3: no other user can take the store's port while the job runs (a port that was only bound,
//    not listened on, could be bound and listened on by anyone with SO_REUSEADDR).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"
#include "tests/testing/torch2.h"
#include "tests/testing/torchrun_ports_lock.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::Subprocess;
using testing::TempDir;
using namespace std::chrono_literals;

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome Launch(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env) {
  testing::TorchrunPortsLock lock(argv[0]);
  Subprocess p(argv, env);
  auto st = p.Wait(180s);
  Outcome o;
  o.output = p.out() + p.err();
  if (st.has_value()) o.exit_code = st->exit_code;
  return o;
}

// Rank 0 exits first; ranks 1-3 wait until its process is gone, then use the job's store (the
// default group's) and exit, never destroying the group. torchrun 2.11: exit 0. ddprun before
// (rank 0's worker hosted the store): "Broken pipe" in ranks 1-3, exit 1; now exit 0 as torchrun.
// ("hold": see the script; torch's own exit race is measured apart, without it.)
TEST(AgentStoreTest, RanksOutliveRankZeroAsUnderTorchrun211) {
  DDPRUN_REQUIRE_TORCH2();
  const std::string script = testing::IntegrationScript("env_init_no_destroy.py");
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", t2.python}};
  const Outcome theirs = Launch({t2.torchrun, "--standalone", "--nproc-per-node=4",
                                 "--monitor-interval=0.1", script, "rank0-first", "hold"},
                                env);
  ASSERT_EQ(theirs.exit_code, 0) << theirs.output;
  const Outcome ours = Launch(
      {BinPath("ddprun"), "--standalone", "--nproc-per-node=4", script, "rank0-first", "hold"},
      env);
  EXPECT_EQ(ours.exit_code, theirs.exit_code) << ours.output;
  EXPECT_EQ(testing::CountOccurrences(ours.output, "used the store after rank 0 exited"), 3)
      << ours.output;
  EXPECT_EQ(ours.output.find("terminate called"), std::string::npos) << ours.output;
}

// The other orders, and a restart: every cold start finds the store empty (the keys of the
// failed attempt are gone) and the job still forms.
TEST(AgentStoreTest, AnyExitOrderAndAColdRestartEndWell) {
  DDPRUN_REQUIRE_TORCH2();
  const std::string script = testing::IntegrationScript("env_init_no_destroy.py");
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", t2.python}};
  for (const char* order : {"rank0-last", "together"}) {
    SCOPED_TRACE(order);
    const Outcome o = Launch(
        {BinPath("ddprun"), "--standalone", "--nproc-per-node=4", script, order, "hold"}, env);
    EXPECT_EQ(o.exit_code, 0) << o.output;
    EXPECT_EQ(testing::CountOccurrences(o.output, " done"), 4) << o.output;
    EXPECT_EQ(o.output.find("terminate called"), std::string::npos) << o.output;
  }
  const Outcome o = Launch({BinPath("ddprun"), "--standalone", "--nproc-per-node=4",
                            "--max-restarts=1", script, "restart", "hold"},
                           env);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("keys of attempt 0 in the store: 0"), std::string::npos) << o.output;
}

// A worker that prints MASTER_PORT, waits for the test's go, then uses the store there as a
// torch 1.13 client: the job's own store, serving set and get.
constexpr char kPortWorker[] = R"(import datetime, os, sys, time
import torch.distributed as dist
print("MASTER_PORT=" + os.environ["MASTER_PORT"], flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.02)  # the test's go: a file (nothing to block on)
s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                  datetime.timedelta(seconds=20))
s.set("job-key", "job-value")
assert s.get("job-key") == b"job-value"
print("STORE OK " + os.environ["TORCHELASTIC_USE_AGENT_STORE"], flush=True)
)";

// What `nobody` tries on the port: bind it with SO_REUSEADDR and listen, on the IPv4 and IPv6
// wildcards and loopbacks. Exit 0: it could take none.
std::string TakePortScript(int port) {
  return absl::StrCat(
      "import socket, sys\n"
      "taken = []\n"
      "for fam, addr in ((socket.AF_INET, '0.0.0.0'), (socket.AF_INET, '127.0.0.1'),\n"
      "                  (socket.AF_INET6, '::'), (socket.AF_INET6, '::1')):\n"
      "    s = socket.socket(fam)\n"
      "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "    if fam == socket.AF_INET6:\n"
      "        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)\n"
      "    try:\n"
      "        s.bind((addr, ",
      port,
      "))\n"
      "        s.listen(1)\n"
      "        taken.append(addr)\n"
      "        socket.socket(fam).close()\n"
      "    except OSError as e:\n"
      "        print(addr, e)\n"
      "print('taken:', taken, flush=True)\n"
      "sys.exit(1 if taken else 0)\n");
}

class AnotherUserTest : public ::testing::TestWithParam<const char*> {};

TEST_P(AnotherUserTest, CannotTakeTheStoresPortWhileTheJobRuns) {
  ASSERT_EQ(geteuid(), 0u) << "the test switches to `nobody` with setpriv: run it as root";
  TempDir dir;
  testing::WriteFile(dir.File("worker.py"), kPortWorker);
  std::vector<std::string> argv = {BinPath("ddprun"), "--standalone", "--nproc-per-node=1"};
  if (std::string(GetParam()) == "in-process") argv.push_back("--restart-mode=in-process");
  argv.insert(argv.end(), {dir.File("worker.py"), dir.File("go")});
  Subprocess job(argv, {{"PYTHON_EXEC", testing::SystemPython()}});
  ASSERT_TRUE(job.WaitForOutputContains("MASTER_PORT=", 60s)) << job.out() << job.err();
  std::smatch m;
  const std::string out = job.out();
  ASSERT_TRUE(std::regex_search(out, m, std::regex("MASTER_PORT=([0-9]+)"))) << out;
  const int port = std::stoi(m[1]);

  Subprocess intruder({"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                       testing::SystemPython(), "-c", TakePortScript(port)});
  auto st = intruder.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << "another user took the job's store port " << port << ":\n"
                              << intruder.out() << intruder.err();

  testing::WriteFile(dir.File("go"), "");
  auto done = job.Wait(60s);
  ASSERT_TRUE(done.has_value()) << job.out() << job.err();
  EXPECT_EQ(done->exit_code, 0) << job.out() << job.err();
  EXPECT_NE(job.out().find("STORE OK True"), std::string::npos) << job.out() << job.err();
}

INSTANTIATE_TEST_SUITE_P(ColdAndInProcess, AnotherUserTest,
                         ::testing::Values("cold", "in-process"));

}  // namespace
}  // namespace ddprun
