// The agent end to end: real ddprun processes, real worker processes (shell scripts and Python
// with Debian's torch), real signals, and the real torchrun as the reference.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "tests/integration/torchrun_reference.h"
#include "tests/testing/fake_sysfs.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::CompareWithTorchrun;
using testing::CountMatches;
using ::testing::HasSubstr;
using testing::LoadJson;
using ::testing::Not;
using testing::ReadFile;
using testing::ReservedPort;
using testing::ReservedPortPair;
using testing::SourcePath;
using testing::Subprocess;
using testing::SystemPython;
using testing::TempDir;
using testing::Torchrun113;
using testing::TorchrunPortsLock;
using testing::WaitUntil;
using testing::WriteFile;
using namespace std::chrono_literals;

std::string Script(const std::string& name) { return testing::IntegrationScript(name); }

std::string TorchrunPath() { return Torchrun113().torchrun; }

std::map<std::string, std::string> Env(std::map<std::string, std::string> extra = {}) {
  extra.emplace("PYTHON_EXEC", testing::SystemPython());
  return extra;
}

// Writes an executable shell script.
std::string ShellWorker(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.File(name);
  WriteFile(path, "#!/bin/sh\n" + body, 0755);
  return path;
}

std::vector<int> ReadPids(const TempDir& dir, int n) {
  std::vector<int> pids;
  for (int i = 0; i < n; ++i) {
    pids.push_back(std::atoi(ReadFile(dir.File("pid" + std::to_string(i))).c_str()));
  }
  return pids;
}

bool FilesExist(const TempDir& dir, const std::string& prefix, int n) {
  for (int i = 0; i < n; ++i) {
    if (ReadFile(dir.File(prefix + std::to_string(i))).empty()) return false;
  }
  return true;
}

// A worker that records its pid in DIR/pid<LOCAL_RANK> and then waits to be killed.
std::string SleepyWorker(const TempDir& dir, const std::string& trap = "") {
  return ShellWorker(dir, "sleepy.sh",
                     trap + "echo $$ > " + dir.path() + "/pid.tmp$LOCAL_RANK && mv " + dir.path() +
                         "/pid.tmp$LOCAL_RANK " + dir.path() +
                         "/pid$LOCAL_RANK\n"
                         "sleep 60 & wait $!\n");
}

TEST(AgentTest, RunsNoOpWorkersAndSucceeds) {
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=4", "--no-python", "true"});
  auto st = p.Wait(20s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
}

TEST(AgentTest, EnvironmentEqualsTorchrunStatic) {
  CompareWithTorchrun(Torchrun113(),
                      {"--nproc_per_node=2", "--monitor_interval=0.1", "--max_restarts=2"},
                      {"--nproc_per_node=2", "--max-restarts=2"}, /*ports_random=*/false);
}

TEST(AgentTest, EnvironmentEqualsTorchrunStandalone) {
  CompareWithTorchrun(Torchrun113(),
                      {"--standalone", "--nproc_per_node=2", "--monitor_interval=0.1"},
                      {"--standalone", "--nproc-per-node=2"}, /*ports_random=*/true);
}

// torchrun substitutes ${local_rank} / $local_rank (and $$) in the worker's arguments; ddprun's
// workers receive exactly what torchrun's do.
TEST(AgentTest, ArgumentMacrosAreSubstitutedAsTorchrunDoes) {
  if (access(TorchrunPath().c_str(), X_OK) != 0) {
    GTEST_SKIP() << "reference torchrun not found at " << TorchrunPath();
  }
  TempDir ref_dir, our_dir;
  auto run = [](const std::string& launcher, std::vector<std::string> flags,
                const std::string& dir) {
    std::vector<std::string> argv = {launcher};
    argv.insert(argv.end(), flags.begin(), flags.end());
    // The script's own $1 $2 $LOCAL_RANK are not macros: both launchers leave them alone.
    argv.insert(argv.end(),
                {"/bin/sh", "-c", "printf '%s|%s\n' \"$1\" \"$2\" > " + dir + "/args-$LOCAL_RANK",
                 "sh", "--gpu=${local_rank}", "x=$$y$local_rank,$local_ranks"});
    TorchrunPortsLock lock(launcher);
    Subprocess p(argv);
    auto st = p.Wait(std::chrono::seconds(60));
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << p.err();
  };
  run(TorchrunPath(),
      {"--standalone", "--nproc_per_node=2", "--monitor_interval=0.1", "--no_python"},
      ref_dir.path());
  run(BinPath("ddprun"), {"--standalone", "--nproc-per-node=2", "--no-python"}, our_dir.path());
  for (int lr = 0; lr < 2; ++lr) {
    const std::string name = "/args-" + std::to_string(lr);
    EXPECT_EQ(ReadFile(our_dir.path() + name),
              "--gpu=" + std::to_string(lr) + "|x=$y" + std::to_string(lr) + ",$local_ranks\n");
    EXPECT_EQ(ReadFile(our_dir.path() + name), ReadFile(ref_dir.path() + name));
  }
}

// Two one-node gloo jobs at once without --standalone or a port: each gets its own free master
// port (torchrun 1.13 gives both 29500 and one of them fails).
TEST(AgentTest, TwoOneNodeJobsAtOnceEachGetTheirOwnPort) {
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", SystemPython()}};
  std::vector<std::unique_ptr<Subprocess>> jobs;
  for (int i = 0; i < 2; ++i) {
    jobs.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("ddprun"), "--nproc-per-node=2",
                                 SourcePath("examples/allreduce_demo.py"), "--steps", "20"},
        env));
  }
  ASSERT_TRUE(testing::ExpectAllExit(jobs, 0, std::chrono::seconds(120)));
  for (auto& job : jobs) EXPECT_THAT(job->out(), HasSubstr("world=2 steps=20"));
}

TEST(AgentTest, AMasterPortInUseIsRefusedBeforeAnyWorkerStarts) {
  TempDir dir;
  // A listening socket on the port, as another job's TCPStore would have.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  Subprocess p({BinPath("ddprun"), "--nproc-per-node=2", "--master-port=" + std::to_string(port),
                "--no-python", "/bin/touch", dir.File("started")});
  auto st = p.Wait(std::chrono::seconds(30));
  close(fd);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2);
  const std::string p_str = std::to_string(port);
  EXPECT_THAT(p.err(),
              HasSubstr("--master-port=" + p_str + ": cannot serve the job's store there (port " +
                        p_str + " is in use)"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("started")));
}

// A torch.distributed.launch command line, unchanged but for the launcher's name, runs a script
// that parses --local_rank once --local-rank-arg=local_rank says so; --use_env turns it off.
TEST(AgentTest, LaunchStyleCommandLinesRunScriptsThatParseLocalRank) {
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", SystemPython()}};
  const std::string script = testing::IntegrationScript("launch_style_local_rank.py");
  auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {BinPath("ddprun")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {script, "--epochs", "3"});
    Subprocess p(argv, env);
    auto st = p.Wait(std::chrono::seconds(60));
    EXPECT_TRUE(st.has_value() && st->exit_code == 0) << p.err();
    return p.out();
  };
  const std::vector<std::string> launch = {"--nproc_per_node", "2", "--nnodes",      "1",
                                           "--node_rank",      "0", "--master_addr", "127.0.0.1"};
  std::vector<std::string> flags = launch;
  flags.push_back("--local-rank-arg=local_rank");
  std::string out = run(flags);
  EXPECT_THAT(out, HasSubstr("arg_local_rank=0 env_local_rank=0 epochs=3"));
  EXPECT_THAT(out, HasSubstr("arg_local_rank=1 env_local_rank=1 epochs=3"));
  flags.push_back("--use_env");
  out = run(flags);
  EXPECT_THAT(out, HasSubstr("arg_local_rank=-1 env_local_rank=0 epochs=3"));
  EXPECT_THAT(out, HasSubstr("arg_local_rank=-1 env_local_rank=1 epochs=3"));
}

TEST(AgentTest, VirtualLocalRankGivesEachWorkerLocalRankZeroAndItsOwnGpu) {
  const std::string script = "echo \"rank=$RANK local=$LOCAL_RANK gpus=$CUDA_VISIBLE_DEVICES\"";
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--virtual-local-rank",
                "--no-python", "/bin/sh", "-c", script},
               {{"CUDA_VISIBLE_DEVICES", "3,5"}});
  auto st = p.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_THAT(p.out(), HasSubstr("rank=0 local=0 gpus=3\n"));
  EXPECT_THAT(p.out(), HasSubstr("rank=1 local=0 gpus=5\n"));

  TempDir dir;
  Subprocess few({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--virtual-local-rank",
                  "--no-python", "/bin/touch", dir.File("started")},
                 {{"CUDA_VISIBLE_DEVICES", "3"}});
  st = few.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2);
  EXPECT_THAT(few.err(), HasSubstr("--virtual-local-rank: CUDA_VISIBLE_DEVICES=3 lists 1 GPU(s) "
                                   "for 2 workers"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("started")));
}

TEST(AgentTest, LogLinePrefixTemplatePrefixesEveryConsoleLine) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2",
                "--log-line-prefix-template=[${hostname} ${rank}/${local_rank} ${role_name}] ",
                "--no-python", "/bin/sh", "-c", "echo out; echo err >&2"});
  auto st = p.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  for (int r = 0; r < 2; ++r) {
    const std::string prefix = absl::StrCat("[", host, " ", r, "/", r, " default] ");
    EXPECT_THAT(p.out(), HasSubstr(prefix + "out\n"));
    EXPECT_THAT(p.err(), HasSubstr(prefix + "err\n"));
  }
}

TEST(AgentTest, DuplicateFiltersCopyMatchingLinesToTheAttemptsFilteredLogs) {
  TempDir logs;
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--rdzv-id=filt",
                "--log-dir=" + logs.path(), "--duplicate-stdout-filters=loss,acc",
                "--duplicate-stderr-filters=WARN", "--no-python", "/bin/sh", "-c",
                "echo step 1 loss 0.5; echo noise; echo acc 0.9; echo WARN slow >&2; "
                "echo fine >&2"});
  auto st = p.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  // The run id of a --standalone job is random: the one folder under the log dir.
  std::string attempt;
  for (const auto& e : std::filesystem::directory_iterator(logs.path())) {
    attempt = e.path().string() + "/attempt_0";
  }
  const std::string out = ReadFile(attempt + "/filtered_stdout.log");
  const std::string err = ReadFile(attempt + "/filtered_stderr.log");
  for (int lr = 0; lr < 2; ++lr) {
    const std::string prefix = "[default" + std::to_string(lr) + "]:";
    EXPECT_THAT(out, HasSubstr(prefix + "step 1 loss 0.5\n"));
    EXPECT_THAT(out, HasSubstr(prefix + "acc 0.9\n"));
    EXPECT_THAT(err, HasSubstr(prefix + "WARN slow\n"));
  }
  EXPECT_THAT(out, Not(HasSubstr("noise")));
  EXPECT_THAT(err, Not(HasSubstr("fine")));
  EXPECT_EQ(testing::CountOccurrences(out, "\n"), 4);
  // The full streams are still in each rank's own logs.
  EXPECT_THAT(ReadFile(attempt + "/0/stdout.log"), HasSubstr("noise"));
}

TEST(AgentTest, CrashThenRestartThenSuccess) {
  TempDir dir;
  const std::string worker =
      ShellWorker(dir, "flaky.sh",
                  "echo \"attempt=$TORCHELASTIC_RESTART_COUNT rank=$RANK\" >> " + dir.File("log") +
                      "\n"
                      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
                      "  if [ \"$LOCAL_RANK\" = 1 ]; then echo 'boom' >&2; exit 3; fi\n"
                      "  sleep 60 & wait $!\n"
                      "fi\n"
                      "exit 0\n");
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--max-restarts=3",
                "--no-python", worker});
  auto st = p.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  const std::string log = ReadFile(dir.File("log"));
  EXPECT_THAT(log, HasSubstr("attempt=0 rank=1"));
  EXPECT_THAT(log, HasSubstr("attempt=1 rank=0"));
  EXPECT_THAT(log, HasSubstr("attempt=1 rank=1"));
  EXPECT_THAT(log, Not(HasSubstr("attempt=2")));
  EXPECT_THAT(p.err(), HasSubstr(", restart 1\n"));
  EXPECT_THAT(p.err(), HasSubstr("boom"));
}

TEST(AgentTest, BudgetSpentExitsOneWithRootCause) {
  TempDir dir;
  const std::string worker =
      ShellWorker(dir, "doomed.sh",
                  "if [ \"$LOCAL_RANK\" = 1 ]; then echo \"step 3: disk on fire (attempt "
                  "$TORCHELASTIC_RESTART_COUNT)\" >&2; exit 7; fi\n"
                  "sleep 60 & wait $!\n");
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--max-restarts=2",
                "--no-python", worker});
  auto st = p.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 1);
  const std::string err = p.err();
  EXPECT_THAT(err, HasSubstr("root cause (first failure)"));
  EXPECT_THAT(err, HasSubstr("rank:        1 (local rank 1)"));
  EXPECT_THAT(err, HasSubstr("exit code 7"));
  EXPECT_THAT(err, HasSubstr("| step 3: disk on fire (attempt 2)"));
  EXPECT_THAT(err, HasSubstr("restarts used: 2 of 2"));
  EXPECT_THAT(err, HasSubstr("restart budget spent (2 of --max-restarts=2 used)"));
}

TEST(AgentTest, SignalDeathIsNamed) {
  TempDir dir;
  const std::string worker =
      ShellWorker(dir, "segv.sh", "if [ \"$LOCAL_RANK\" = 0 ]; then kill -SEGV $$; fi\nexit 0\n");
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--no-python", worker});
  auto st = p.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 1);
  EXPECT_THAT(p.err(), HasSubstr("signal SIGSEGV (11)"));
  EXPECT_THAT(p.err(), HasSubstr("rank:        0 (local rank 0)"));
}

TEST(AgentTest, SigtermStopsWorkersAndExits143) {
  TempDir dir;
  const std::string worker = SleepyWorker(dir);
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--no-python", worker});
  ASSERT_TRUE(WaitUntil([&] { return FilesExist(dir, "pid", 2); }, 20s)) << p.err();
  const std::vector<int> pids = ReadPids(dir, 2);
  p.Signal(SIGTERM);
  auto st = p.Wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 143) << p.err();
  for (int pid : pids) EXPECT_FALSE(testing::ProcessAlive(pid)) << pid;
}

// `nohup ddprun ...`: SIGHUP was ignored when ddprun started, so a hang-up does not stop the job
// (torchrun 2.x stops, pytorch issue 76894); SIGTERM still does. Without nohup, SIGHUP stops it.
TEST(AgentTest, UnderNohupAHangUpDoesNotStopTheJob) {
  TempDir dir;
  const std::string worker = ShellWorker(
      dir, "w.sh", "echo up > " + dir.File("started$LOCAL_RANK") + "\nsleep 2\necho finished\n");
  Subprocess nohup({"/usr/bin/nohup", BinPath("ddprun"), "--standalone", "--nproc-per-node=2",
                    "--no-python", worker});
  ASSERT_TRUE(WaitUntil([&] { return FilesExist(dir, "started", 2); }, 20s)) << nohup.err();
  nohup.Signal(SIGHUP);  // nohup exec'd ddprun: the same process
  auto st = nohup.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << nohup.err();
  EXPECT_EQ(CountMatches(nohup.out(), "finished"), 2) << nohup.out();

  TempDir plain_dir;
  const std::string sleepy = SleepyWorker(plain_dir);
  Subprocess plain(
      {BinPath("ddprun"), "--standalone", "--nproc-per-node=1", "--no-python", sleepy});
  ASSERT_TRUE(WaitUntil([&] { return FilesExist(plain_dir, "pid", 1); }, 20s)) << plain.err();
  plain.Signal(SIGHUP);
  st = plain.Wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 129) << plain.err();
}

TEST(AgentTest, StopTimeoutEscalatesToSigkill) {
  TempDir dir;
  // Ignores SIGTERM, as a worker stuck in a collective might.
  const std::string worker = SleepyWorker(dir, "trap '' TERM\n");
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--stop-timeout=0.3",
                "--no-python", worker});
  ASSERT_TRUE(WaitUntil([&] { return FilesExist(dir, "pid", 2); }, 20s)) << p.err();
  const auto start = std::chrono::steady_clock::now();
  p.Signal(SIGINT);
  auto st = p.Wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 130);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_THAT(p.err(), HasSubstr("sending SIGKILL"));
  for (int pid : ReadPids(dir, 2)) EXPECT_FALSE(testing::ProcessAlive(pid)) << pid;
}

TEST(AgentTest, NoOrphansAfterKill9) {
  TempDir dir;
  // Each worker also has a child of its own (as a DataLoader would), which PR_SET_PDEATHSIG
  // does not reach: the orphan guard must.
  const std::string worker =
      SleepyWorker(dir, "sleep 60 & echo $! > " + dir.path() + "/child$LOCAL_RANK\n");
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=3", "--no-python", worker});
  ASSERT_TRUE(WaitUntil([&] { return FilesExist(dir, "pid", 3); }, 20s)) << p.err();
  std::vector<int> pids = ReadPids(dir, 3);
  for (int i = 0; i < 3; ++i) {
    pids.push_back(std::atoi(ReadFile(dir.File("child" + std::to_string(i))).c_str()));
    ASSERT_GT(pids.back(), 0);
  }
  p.Signal(SIGKILL);
  ASSERT_TRUE(p.Wait(5s).has_value());
  const bool all_gone = WaitUntil(
      [&] {
        for (int pid : pids) {
          if (testing::ProcessAlive(pid)) return false;
        }
        return true;
      },
      1s);
  EXPECT_TRUE(all_gone) << "a worker or its child outlived ddprun by more than a second";
}

TEST(AgentTest, SignalsToHandleForwardsUsr1) {
  TempDir dir;
  const std::string worker = SleepyWorker(
      dir, "trap 'echo got-usr1 > " + dir.path() + "/usr1-$LOCAL_RANK; exit 0' USR1\n");
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2",
                "--signals-to-handle=SIGTERM,SIGINT,SIGUSR1", "--no-python", worker});
  ASSERT_TRUE(WaitUntil([&] { return FilesExist(dir, "pid", 2); }, 20s)) << p.err();
  p.Signal(SIGUSR1);
  auto st = p.Wait(10s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_EQ(ReadFile(dir.File("usr1-0")), "got-usr1\n");
  EXPECT_EQ(ReadFile(dir.File("usr1-1")), "got-usr1\n");
}

TEST(AgentTest, RecordErrorFileShownInSummary) {
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=1", Script("record_error.py")},
               Env());
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 1);
  const std::string err = p.err();
  EXPECT_THAT(err, HasSubstr("error:       ValueError: learning rate must be positive, got -1.0"));
  EXPECT_THAT(err, HasSubstr("traceback:"));
  EXPECT_THAT(err, HasSubstr("in check"));
}

// ddprun under another launcher that gave it a TORCHELASTIC_ERROR_FILE passes the root cause's
// error file up, with errorCode, exactly as the real torchrun does.
TEST(AgentTest, UnderAnotherLauncherTheWorkersErrorFileGoesUpAsTorchrunsDoes) {
  if (access(TorchrunPath().c_str(), X_OK) != 0) {
    GTEST_SKIP() << "reference torchrun not found at " << TorchrunPath();
  }
  TempDir dir;
  auto run = [&](std::vector<std::string> argv, const std::string& parent_file) {
    std::map<std::string, std::string> env = Env();
    env["TORCHELASTIC_ERROR_FILE"] = parent_file;
    TorchrunPortsLock lock(argv[0]);
    Subprocess p(argv, env);
    auto st = p.Wait(60s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 1) << p.err();
  };
  run({TorchrunPath(), "--standalone", "--nproc_per_node=1", "--monitor_interval=0.1",
       Script("record_error.py")},
      dir.File("theirs.json"));
  run({BinPath("ddprun"), "--standalone", "--nproc-per-node=1", Script("record_error.py")},
      dir.File("ours.json"));
  const nlohmann::json theirs = LoadJson(dir.File("theirs.json"));
  const nlohmann::json ours = LoadJson(dir.File("ours.json"));
  ASSERT_TRUE(ours.contains("message")) << ours.dump();
  EXPECT_EQ(ours["message"]["errorCode"], theirs["message"]["errorCode"]);
  EXPECT_EQ(ours["message"]["errorCode"], 1);
  EXPECT_EQ(ours["message"]["message"], theirs["message"]["message"]);
  EXPECT_THAT(ours["message"]["message"].get<std::string>(),
              HasSubstr("ValueError: learning rate must be positive, got -1.0"));
  EXPECT_TRUE(ours["message"]["extraInfo"].contains("py_callstack"));
}

// Runs `argv` with its stdout (and, unless `stderr_to_pipe`, its stderr) on a new terminal of
// `cols` columns, as a user's shell would; returns what appeared on the terminal, what went to
// the stderr pipe, and the exit code (-1: it did not exit within 60 s).
struct TerminalRun {
  std::string terminal;
  std::string stderr_pipe;
  int exit_code = -1;
};
TerminalRun RunOnATerminal(const std::vector<std::string>& argv, unsigned short cols,
                           bool stderr_to_pipe) {
  TerminalRun result;
  int err_pipe[2];
  if (pipe(err_pipe) != 0) return result;
  struct winsize size {};
  size.ws_col = cols;
  size.ws_row = 40;
  int master = -1;
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.rfind("COLUMNS=", 0) != 0 && entry.rfind("LINES=", 0) != 0) {
      env_strings.push_back(entry);
    }
  }
  env_strings.push_back("PYTHON_EXEC=" + testing::SystemPython());
  std::vector<char*> c_argv, c_env;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (auto& e : env_strings) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  const pid_t pid = forkpty(&master, nullptr, nullptr, &size);
  if (pid == 0) {
    if (stderr_to_pipe) dup2(err_pipe[1], 2);
    close(err_pipe[0]);
    close(err_pipe[1]);
    execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }
  close(err_pipe[1]);
  if (pid < 0) return result;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  bool terminal_open = true, pipe_open = true;
  while ((terminal_open || pipe_open) && std::chrono::steady_clock::now() < deadline) {
    struct pollfd fds[2] = {{terminal_open ? master : -1, POLLIN, 0},
                            {pipe_open ? err_pipe[0] : -1, POLLIN, 0}};
    if (poll(fds, 2, 200) <= 0) continue;
    char buf[4096];
    if (fds[0].revents != 0) {
      const ssize_t n = read(master, buf, sizeof(buf));
      if (n > 0) result.terminal.append(buf, n);
      if (n <= 0) terminal_open = false;  // EIO: the last writer has gone
    }
    if (fds[1].revents != 0) {
      const ssize_t n = read(err_pipe[0], buf, sizeof(buf));
      if (n > 0) result.stderr_pipe.append(buf, n);
      if (n <= 0) pipe_open = false;
    }
  }
  close(master);
  close(err_pipe[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

// ddprun on a terminal: a worker whose stream is shown there writes to a terminal of its own,
// as wide as ddprun's (as under torchrun without --tee); stdout and stderr stay apart; pipes
// with --no-worker-tty and with --tee.
TEST(AgentTest, OnATerminalWorkersSeeATerminalSizedLikeIt) {
  TempDir dir;
  const std::string script = dir.File("tty.py");
  WriteFile(script,
            "import os, shutil, sys\n"
            "print('out', os.isatty(1), shutil.get_terminal_size().columns, flush=True)\n"
            "print('err', os.isatty(2), file=sys.stderr, flush=True)\n");
  const std::vector<std::string> base = {BinPath("ddprun"), "--standalone", "--nproc-per-node=2"};
  auto with = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(script);
    return argv;
  };
  TerminalRun both = RunOnATerminal(with({}), 137, /*stderr_to_pipe=*/false);
  ASSERT_EQ(both.exit_code, 0) << both.terminal;
  EXPECT_EQ(testing::CountOccurrences(both.terminal, "out True 137"), 2) << both.terminal;
  EXPECT_EQ(testing::CountOccurrences(both.terminal, "err True"), 2) << both.terminal;

  TerminalRun apart = RunOnATerminal(with({}), 99, /*stderr_to_pipe=*/true);
  ASSERT_EQ(apart.exit_code, 0) << apart.terminal << apart.stderr_pipe;
  EXPECT_EQ(testing::CountOccurrences(apart.terminal, "out True 99"), 2) << apart.terminal;
  EXPECT_EQ(testing::CountOccurrences(apart.stderr_pipe, "err False"), 2) << apart.stderr_pipe;
  EXPECT_THAT(apart.terminal, Not(HasSubstr("err "))) << "stderr stays off stdout's terminal";

  for (const std::string flag : {"--no-worker-tty", "--tee=3"}) {
    TerminalRun piped = RunOnATerminal(with({flag}), 137, /*stderr_to_pipe=*/false);
    ASSERT_EQ(piped.exit_code, 0) << flag << piped.terminal;
    EXPECT_EQ(testing::CountOccurrences(piped.terminal, "out False"), 2) << flag << piped.terminal;
    EXPECT_EQ(testing::CountOccurrences(piped.terminal, "err False"), 2) << flag << piped.terminal;
  }
}

// The same for workers started from --preload spares: their pseudo-terminals come with the
// hand-over (the spares themselves were started on files in memory).
TEST(AgentTest, OnATerminalWorkersStartedFromSparesSeeTheirTerminal) {
  TempDir dir;
  const std::string script = dir.File("tty.py");
  WriteFile(script,
            "import os, shutil, sys, time\n"
            "rc = os.environ['TORCHELASTIC_RESTART_COUNT']\n"
            "print('out', rc, os.isatty(1), shutil.get_terminal_size().columns, flush=True)\n"
            "print('err', rc, os.isatty(2), file=sys.stderr, flush=True)\n"
            "if rc == '0':\n"
            "    time.sleep(1.5)\n"
            "    sys.exit(1 if os.environ['RANK'] == '0' else 0)\n");
  TerminalRun run = RunOnATerminal({BinPath("ddprun"), "--standalone", "--nproc-per-node=2",
                                    "--max-restarts=1", "--preload=json", script},
                                   137, /*stderr_to_pipe=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.terminal;
  EXPECT_THAT(run.terminal, HasSubstr("preload: 2 of 2 worker(s) started from spares"))
      << run.terminal;
  EXPECT_EQ(testing::CountOccurrences(run.terminal, "out 1 True 137"), 2) << run.terminal;
  EXPECT_EQ(testing::CountOccurrences(run.terminal, "err 1 True"), 2) << run.terminal;
}

// --log-dir: every step of the run in LOG_DIR/RUN_ID/events.jsonl, and the restart as one
// timeline line on stderr.
TEST(AgentTest, EventsJsonlAndATimelineLinePerRestart) {
  TempDir dir;
  // Attempt 0: rank 1 fails with exit 3 while rank 0 waits; attempt 1: both succeed.
  const std::string worker = ShellWorker(dir, "once.sh",
                                         "[ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ] && exit 0\n"
                                         "[ \"$RANK\" = 1 ] && exit 3\nexec sleep 30\n");
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--max-restarts=1",
                "--log-dir=" + dir.File("logs"), "--no-python", worker},
               Env());
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << p.err();
  // The new round may complete before or after the old workers are all stopped (the local
  // rendezvous assigns at once); the workers start after both.
  EXPECT_EQ(CountMatches(p.err(),
                         "restart 1: rank 1 on \\S+ exited 3 -> (all stopped \\+\\d+ ms -> "
                         "round \\d+ complete \\+\\d+ ms|round \\d+ complete \\+\\d+ ms -> "
                         "all stopped \\+\\d+ ms) -> 2 workers running \\+\\d+ ms"),
            1)
      << p.err();
  std::vector<std::filesystem::path> runs;
  for (const auto& e : std::filesystem::directory_iterator(dir.File("logs"))) {
    runs.push_back(e.path());
  }
  ASSERT_EQ(runs.size(), 1u);
  std::ifstream in(runs[0] / "events.jsonl");
  std::vector<std::string> steps;
  int64_t last_ts = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    steps.push_back(j["step"]);
    EXPECT_GE(j["ts_ms"].get<int64_t>(), last_ts);
    last_ts = j["ts_ms"];
    EXPECT_EQ(j["run_id"], runs[0].filename().string());
    if (j["step"] == "failure_detected") {
      EXPECT_EQ(j["cause"], "worker_exit");
      EXPECT_EQ(j["rank"], 1);
      EXPECT_EQ(j["detail"], "exited 3");
    }
    if (j["step"] == "closed") {
      EXPECT_EQ(j["detail"], "exit 0: all workers exited 0");
    }
  }
  ASSERT_EQ(steps.size(), 9u);
  if (steps[5] == "round_complete") std::swap(steps[5], steps[6]);
  EXPECT_EQ(steps, (std::vector<std::string>{"joining", "round_complete", "workers_started",
                                             "failure_detected", "stop_begun", "stop_finished",
                                             "round_complete", "workers_started", "closed"}));
}

// --numa-binding on a fake machine whose GPU 0 sits on NUMA node 0 (CPU 0) and GPU 1 on node 1
// (CPU 1): each worker really runs on its GPU's CPU (the kernel's Cpus_allowed_list), and a
// binding that cannot be made stops the job before any worker starts.
TEST(AgentTest, NumaBindingRunsEachWorkerOnItsGpusCpus) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  if (!CPU_ISSET(0, &mine) || !CPU_ISSET(1, &mine)) GTEST_SKIP() << "needs CPUs 0 and 1";
  TempDir dir;
  testing::FakeMachine machine;
  for (int cpu : {0, 1}) {
    testing::FakeMachine::Node node;
    node.socket = cpu;
    node.cores = {cpu};
    machine.nodes.push_back(node);
  }
  machine.gpus = {{"0000:3b:00.0", 0}, {"0000:af:00.0", 1}};
  testing::WriteFakeSysfs(dir.File("sys"), machine);
  const std::string worker = ShellWorker(
      dir, "cpus.sh",
      "grep Cpus_allowed_list /proc/self/status | cut -f2 > " + dir.path() + "/cpus$RANK\n");
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--numa-binding=node",
                "--no-python", worker},
               Env({{"DDPRUN_SYSFS_ROOT", dir.File("sys")}}));
  auto st = p.Wait(30s);
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << p.err();
  EXPECT_EQ(ReadFile(dir.File("cpus0")), "0\n");
  EXPECT_EQ(ReadFile(dir.File("cpus1")), "1\n");
  EXPECT_THAT(p.err(), HasSubstr("numa binding (node): local rank 1 -> GPU 1 (0000:af:00.0): "
                                 "CPUs 1"));
  // CUDA_VISIBLE_DEVICES picks the GPUs: local rank 0 gets GPU 1.
  Subprocess swapped({BinPath("ddprun"), "--standalone", "--nproc-per-node=1",
                      "--numa-binding=socket", "--no-python", worker},
                     Env({{"DDPRUN_SYSFS_ROOT", dir.File("sys")}, {"CUDA_VISIBLE_DEVICES", "1"}}));
  st = swapped.Wait(30s);
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << swapped.err();
  EXPECT_EQ(ReadFile(dir.File("cpus0")), "1\n");

  // Bindings that cannot be made: exit 2 naming the flag, no worker started.
  std::remove(dir.File("cpus0").c_str());
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> bad = {
      {{{"CUDA_VISIBLE_DEVICES", "GPU-5f2c0a"}}, "CUDA_VISIBLE_DEVICES=GPU-5f2c0a"},
      {{{"CUDA_VISIBLE_DEVICES", "0,7"}}, "local rank 1: GPU 7 is not on this machine"},
  };
  for (const auto& [extra, message] : bad) {
    std::map<std::string, std::string> env = Env(extra);
    env["DDPRUN_SYSFS_ROOT"] = dir.File("sys");
    Subprocess q({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--numa-binding=node",
                  "--no-python", worker},
                 env);
    auto r = q.Wait(30s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->exit_code, 2) << q.err();
    EXPECT_THAT(q.err(), HasSubstr(message));
    EXPECT_THAT(q.err(), HasSubstr("--numa-binding"));
    EXPECT_FALSE(std::filesystem::exists(dir.File("cpus0"))) << message;
  }
}

// The lines of `err` that are torchelastic events (JSON objects named torchelastic.*).
std::vector<nlohmann::json> Events(const std::string& err) {
  std::vector<nlohmann::json> events;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("{", 0) != 0) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.value("name", "").rfind("torchelastic.", 0) == 0) {
      events.push_back(std::move(j));
    }
  }
  return events;
}

// --event-log-handler=console prints the events torchrun records at the end of a run: one per
// worker of the last group, then the agent's, with torch's names, sources, states and fields
// (the reference is Debian's torchrun with its event handler pointed at stderr).
TEST(AgentTest, EventLogHandlerConsolePrintsTorchrunsEndOfRunEvents) {
  TempDir dir;
  // Rank 1 fails with exit 3; rank 0 waits to be stopped (TERMINATED).
  const std::string worker =
      ShellWorker(dir, "fail1.sh", "[ \"$RANK\" = 1 ] && exit 3\nexec sleep 60\n");
  auto run = [&](std::vector<std::string> argv, std::map<std::string, std::string> env) {
    TorchrunPortsLock lock(argv[0]);
    Subprocess p(argv, Env(env));
    auto st = p.Wait(60s);
    EXPECT_TRUE(st.has_value());
    EXPECT_EQ(st.has_value() ? st->exit_code : -1, 1) << p.err();
    return Events(p.err());
  };
  const std::vector<nlohmann::json> theirs =
      run({Script("torchrun_py311.py"), "--standalone", "--nproc_per_node=2",
           "--monitor_interval=0.1", "--no_python", worker},
          {{"TORCHRUN_EVENTS_TO_STDERR", "1"}});
  const std::vector<nlohmann::json> ours =
      run({BinPath("ddprun"), "--standalone", "--nproc-per-node=2", "--event-log-handler=console",
           "--no-python", worker},
          {});
  ASSERT_EQ(theirs.size(), 3u);
  ASSERT_EQ(ours.size(), theirs.size());
  auto by_rank = [](const std::vector<nlohmann::json>& events, nlohmann::json rank) {
    for (const auto& e : events) {
      if (e["metadata"]["global_rank"] == rank) return e;
    }
    return nlohmann::json();
  };
  for (const nlohmann::json& rank : {nlohmann::json(0), nlohmann::json(1), nlohmann::json()}) {
    const nlohmann::json t = by_rank(theirs, rank);
    const nlohmann::json o = by_rank(ours, rank);
    ASSERT_FALSE(t.is_null()) << rank;
    ASSERT_FALSE(o.is_null()) << rank << " " << nlohmann::json(ours).dump();
    EXPECT_EQ(o["name"], t["name"]) << rank;
    EXPECT_EQ(o["source"], t["source"]) << rank;
    EXPECT_TRUE(o["timestamp"].is_number_integer());
    for (const auto& [key, value] : t["metadata"].items()) {
      ASSERT_TRUE(o["metadata"].contains(key)) << key;
      EXPECT_EQ(o["metadata"][key].type(), value.type()) << key << " " << o.dump();
    }
    for (const char* key : {"state", "group_rank", "role", "agent_restarts"}) {
      EXPECT_EQ(o["metadata"][key], t["metadata"][key]) << key;
    }
    const auto inner_t = nlohmann::json::parse(t["metadata"]["metadata"].get<std::string>());
    const auto inner_o = nlohmann::json::parse(o["metadata"]["metadata"].get<std::string>());
    EXPECT_EQ(inner_o, inner_t);  // group_world_size, entry_point, [local_rank], ...
  }
  EXPECT_EQ(by_rank(ours, 0)["name"], "torchelastic.worker.status.TERMINATED");
  EXPECT_EQ(by_rank(ours, 1)["name"], "torchelastic.worker.status.FAILED");
  EXPECT_EQ(by_rank(ours, 1)["metadata"]["exit_code"], 3);
  EXPECT_EQ(by_rank(ours, nlohmann::json())["name"], "torchelastic.worker.status.SUCCEEDED")
      << "the agent's run returned, as torch records it";
  EXPECT_EQ(ours.back()["source"], "AGENT") << "the agent's event comes last";

  // A job that succeeds: every worker SUCCEEDED; the default handler (null) prints nothing.
  const std::string ok = ShellWorker(dir, "ok.sh", "exit 0\n");
  for (const bool console : {true, false}) {
    std::vector<std::string> argv = {BinPath("ddprun"), "--standalone", "--nproc-per-node=2",
                                     "--no-python", ok};
    if (console) argv.insert(argv.begin() + 1, "--event-log-handler=console");
    Subprocess p(argv, Env());
    auto st = p.Wait(60s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 0) << p.err();
    const std::vector<nlohmann::json> events = Events(p.err());
    ASSERT_EQ(events.size(), console ? 3u : 0u) << p.err();
    for (const auto& e : events) EXPECT_EQ(e["metadata"]["state"], "SUCCEEDED") << e.dump();
  }
}

// gloo_allreduce.py's files: every one of 4 ranks saw the same all-reduced tensor.
void ExpectOneGlooWorldOfFour(const TempDir& out) {
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(ReadFile(out.File("rank" + std::to_string(rank) + ".txt")), "4 6\n") << rank;
  }
}

TEST(AgentTest, StaticTwoNodesFormOneWorld) {
  TempDir out;
  ReservedPortPair port;  // MASTER_PORT and node 0's rendezvous on MASTER_PORT + 1
  ASSERT_GT(port.port(), 0);
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("ddprun"), "--rdzv-backend=static", "--nnodes=2",
                                 "--node-rank=" + std::to_string(node), "--master-addr=127.0.0.1",
                                 "--master-port=" + std::to_string(port.port()),
                                 "--nproc-per-node=2", Script("gloo_allreduce.py"), out.path()},
        Env()));
  }
  ASSERT_TRUE(testing::ExpectAllExit(nodes, 0, 90s));
  ExpectOneGlooWorldOfFour(out);
}

// A platform (Kubeflow's PyTorchJob, SenseCore) hands each node MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE = nodes and RANK = node rank: plain `ddprun --nproc-per-node=2 script` on each
// forms one world of 4, and says what it took.
TEST(AgentTest, PlatformEnvironmentFormsOneMultiNodeWorld) {
  TempDir out;
  ReservedPortPair port;  // MASTER_PORT and node 0's rendezvous on MASTER_PORT + 1
  ASSERT_GT(port.port(), 0);
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int node = 0; node < 2; ++node) {
    std::map<std::string, std::string> env = Env();
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(port.port());
    env["WORLD_SIZE"] = "2";
    env["RANK"] = std::to_string(node);
    nodes.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{BinPath("ddprun"), "--nproc-per-node=2",
                                 Script("gloo_allreduce.py"), out.path()},
        env));
  }
  ASSERT_TRUE(testing::ExpectAllExit(nodes, 0, 90s));
  ExpectOneGlooWorldOfFour(out);
  EXPECT_THAT(nodes[1]->err(), HasSubstr("platform environment: node 1 of 2 (RANK, WORLD_SIZE), "
                                         "master 127.0.0.1:" +
                                         std::to_string(port.port())));
}

// Inside a worker of another launcher RANK and WORLD_SIZE count workers: ddprun must not read
// them as a platform's node rank and count (it would wait for nodes that never come).
TEST(AgentTest, InsideAnotherLaunchersWorkerThePlatformReadingStaysOff) {
  std::map<std::string, std::string> env = {{"MASTER_ADDR", "127.0.0.1"},
                                            {"MASTER_PORT", "29999"},
                                            {"WORLD_SIZE", "8"},
                                            {"RANK", "5"},
                                            {"LOCAL_RANK", "1"}};
  Subprocess p({BinPath("ddprun"), "--nproc-per-node=1", "--no-python", "/bin/sh", "-c",
                "echo world=$WORLD_SIZE rank=$RANK"},
               env);
  auto st = p.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_THAT(p.out(), HasSubstr("world=1 rank=0"));
  EXPECT_THAT(p.err(), Not(HasSubstr("platform environment")));

  env.erase("LOCAL_RANK");
  env["RANK"] = "x";
  Subprocess bad({BinPath("ddprun"), "--nproc-per-node=1", "--no-python", "/bin/true"}, env);
  st = bad.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2);
  EXPECT_THAT(bad.err(), HasSubstr("RANK=x: not a node rank below WORLD_SIZE=8"));
}

// A tqdm bar redraws one line with \r and ends it only when done: its updates must reach the
// console as they come, not when the line ends (for a one-hour epoch, an hour later).
TEST(AgentTest, TqdmUpdatesReachTheConsoleWhileTheLineIsUnfinished) {
  TempDir dir;
  Subprocess p({BinPath("ddprun"), "--standalone", "--nproc-per-node=1", "--tee=2",
                Script("tqdm_worker.py"), dir.File("gate")},
               Env());
  ASSERT_TRUE(p.WaitForOutputContains(" 50%", 60s)) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("\r[default0]: 50%|"));
  EXPECT_THAT(p.err(), Not(HasSubstr("100%")));  // still running: the update came live
  WriteFile(dir.File("gate"), "");
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("\r[default0]:100%|"));
  EXPECT_THAT(p.out(), HasSubstr("finished\n"));  // stdout is not teed: no prefix
}

TEST(AgentTest, TeePrefixesLinesAndLogDirKeepsEveryAttempt) {
  TempDir dir, logs;
  const std::string worker = ShellWorker(
      dir, "chatty.sh",
      "echo \"hello from $RANK\"\necho \"warning from $RANK\" >&2\n"
      "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ] && exit 1\nexit 0\n");
  Subprocess p({BinPath("ddprun"), "--nproc-per-node=2", "--tee=3", "--max-restarts=1",
                "--log-dir=" + logs.path(), "--no-python", worker});
  auto st = p.Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_THAT(p.out(), HasSubstr("[default0]:hello from 0\n"));
  EXPECT_THAT(p.out(), HasSubstr("[default1]:hello from 1\n"));
  EXPECT_THAT(p.err(), HasSubstr("[default1]:warning from 1\n"));
  // static backend, default run id "none"; one folder per attempt and per local rank
  EXPECT_EQ(ReadFile(logs.path() + "/none/attempt_0/1/stdout.log"), "hello from 1\n");
  EXPECT_EQ(ReadFile(logs.path() + "/none/attempt_1/1/stderr.log"), "warning from 1\n");
  EXPECT_EQ(ReadFile(logs.path() + "/none/attempt_1/0/stdout.log"), "hello from 0\n");
}

TEST(AgentTest, RedirectsAndLocalRanksFilter) {
  TempDir dir, logs;
  const std::string worker = ShellWorker(dir, "say.sh", "echo \"line from $LOCAL_RANK\"\n");
  Subprocess p(
      {BinPath("ddprun"), "--nproc-per-node=3", "--local-ranks-filter=1", "--no-python", worker});
  ASSERT_TRUE(p.Wait(20s).has_value());
  EXPECT_EQ(p.out(), "line from 1\n");
  Subprocess r({BinPath("ddprun"), "--nproc-per-node=2", "-r", "0:1", "--log-dir", logs.path(),
                "--no-python", worker});
  ASSERT_TRUE(r.Wait(20s).has_value());
  EXPECT_EQ(r.out(), "line from 1\n");  // rank 0's stdout went to its file only
  EXPECT_EQ(ReadFile(logs.path() + "/none/attempt_0/0/stdout.log"), "line from 0\n");
}

// --ranks-filter shows global ranks (pytorch issue 60911): on two static nodes of two workers,
// ranks 1 and 2 are local rank 1 of node 0 and local rank 0 of node 1.
TEST(AgentTest, RanksFilterShowsGlobalRanksAcrossNodes) {
  TempDir dir;
  ReservedPortPair port;  // MASTER_PORT and node 0's rendezvous on MASTER_PORT + 1
  ASSERT_GT(port.port(), 0);
  const std::string worker = ShellWorker(dir, "say.sh", "echo \"line from $RANK\"\n");
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(std::make_unique<Subprocess>(std::vector<std::string>{
        BinPath("ddprun"), "--rdzv-backend=static", "--nnodes=2",
        "--node-rank=" + std::to_string(node), "--master-addr=127.0.0.1",
        "--master-port=" + std::to_string(port.port()), "--nproc-per-node=2", "--ranks-filter=1,2",
        "--no-python", worker}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(nodes, 0, 30s));
  EXPECT_EQ(nodes[0]->out(), "line from 1\n");
  EXPECT_EQ(nodes[1]->out(), "line from 2\n");
}

TEST(AgentTest, BadInputExitsTwoAndStartsNothing) {
  TempDir dir;
  const std::string marker = dir.File("started");
  const std::string worker = ShellWorker(dir, "mark.sh", "touch " + marker + "\n");
  const std::string yaml_bad = dir.File("bad.yaml");
  WriteFile(yaml_bad, "nproc-per-node: 2\nbogus-key: 1\n");
  const std::vector<std::vector<std::string>> cases = {
      {"--nnodes=3:2"},
      {"--nnodes=abc"},
      {"--nproc-per-node=0"},
      {"--nproc-per-node=-1"},
      {"--nproc-per-node=many"},
      {"--no-such-flag"},
      {"--master-port=0"},
      {"--master-port=65536"},
      {"--config=" + yaml_bad},
      {"--rdzv-endpoint=h:0"},
      {"--event-log-handler=file"},
      {"--numa-binding=numa"},
  };
  for (const auto& flags : cases) {
    std::vector<std::string> argv = {BinPath("ddprun")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--no-python");
    argv.push_back(worker);
    Subprocess p(argv);
    auto st = p.Wait(10s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << flags[0];
    const std::string err = p.err();
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_THAT(err, HasSubstr("ddprun: error: ")) << flags[0];
    EXPECT_FALSE(std::filesystem::exists(marker)) << flags[0];
  }
  // Missing or non-executable entrypoints.
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {BinPath("ddprun"), dir.File("missing.py")},
           {BinPath("ddprun"), "--no-python", dir.File("missing-binary")},
           {BinPath("ddprun"), "--no-python", yaml_bad}}) {
    Subprocess p(argv);
    auto st = p.Wait(10s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << argv.back();
    EXPECT_THAT(p.err(), HasSubstr(argv.back())) << argv.back();
  }
}

}  // namespace
}  // namespace ddprun
