// --preload end to end: real ddprun, Debian's python3 and torch 1.13, real spares. The core
// check is equivalence: one script reports everything a worker can see of how it was started
// (tests/integration/scripts/preload_report.py) and ends in a chosen way; a run with
// --preload=torch must leave the same reports, the same stderr and the same error file as a
// cold run, at the first start (two nodes, the second joining once the first's spare is ready)
// and after restarts, in script and -m mode.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "launcher/process/proc_info.h"
#include "launcher/workers/worker_env.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::CountOccurrences;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;
using testing::ReservedPort;
using testing::RunDir;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;
using namespace std::chrono_literals;

const std::string kScripts = testing::SourcePath("tests/integration/scripts");

std::map<std::string, std::string> Env(std::map<std::string, std::string> extra = {}) {
  extra.emplace("PYTHON_EXEC", testing::SystemPython());
  return extra;
}

// A report with what legitimately differs between two runs taken out: ports, the run's own
// folders (the log root, and the agent's private folder of its step-report FIFO).
nlohmann::json LoadReport(const std::string& path, const std::string& log_root) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(path));
  auto& env = j["environ"];
  env.erase("MASTER_PORT");
  env.erase("REPORT_DIR");
  if (env.contains("DDPRUN_PROGRESS_FILE")) env["DDPRUN_PROGRESS_FILE"] = "IPC_DIR/progress";
  std::string error_file = env.value("TORCHELASTIC_ERROR_FILE", "");
  if (error_file.rfind(log_root, 0) == 0)
    error_file = "LOG_ROOT" + error_file.substr(log_root.size());
  env["TORCHELASTIC_ERROR_FILE"] = error_file;
  return j;
}

std::string Differences(const nlohmann::json& a, const nlohmann::json& b) {
  std::string out;
  for (auto it = a.begin(); it != a.end(); ++it) {
    if (!b.contains(it.key()) || b[it.key()] != it.value()) {
      absl::StrAppend(&out, "\n  ", it.key(), ": cold ", it.value().dump(), "\n    preload ",
                      b.contains(it.key()) ? b[it.key()].dump() : "(missing)");
    }
  }
  return out;
}

struct TwoNodeRun {
  TempDir reports;        // node 0's
  TempDir other_reports;  // node 1's
  TempDir logs;
  std::string node0_err;
  int node0_exit = -1;
};

// Runs `entry` (a script, or -m and a module) on two agents with one worker each: node 0
// hosts the rendezvous (and preloads torch when asked); node 1 joins once node 0 is ready for
// it (its spare has imported torch), so that node 0's first start comes from its spare.
void RunTwoNodes(bool preload, const std::vector<std::string>& entry, const std::string& plan,
                 int max_restarts, TwoNodeRun* run) {
  ReservedPort port;
  ASSERT_GT(port.port(), 0);
  const std::string endpoint = "--rdzv-endpoint=127.0.0.1:" + std::to_string(port.port());
  auto agent = [&](int node, bool with_preload, const std::string& log_dir,
                   const std::string& reports) {
    std::vector<std::string> argv = {BinPath("ddprun"),
                                     "--rdzv-backend=c10d",
                                     endpoint,
                                     "--rdzv-id=preload-equivalence",
                                     "--nnodes=2",
                                     "--node-rank=" + std::to_string(node),
                                     "--max-restarts=" + std::to_string(max_restarts),
                                     "--log-dir=" + log_dir};
    if (node == 0) argv.push_back("--rdzv-conf=is_host=1");
    if (with_preload) argv.push_back("--preload=torch");
    argv.insert(argv.end(), entry.begin(), entry.end());
    argv.push_back(plan);
    // A user PYTHONPATH: the spare's hook must leave it (and sys.path) exactly as it was.
    return std::make_unique<Subprocess>(
        argv, Env({{"REPORT_DIR", reports}, {"PYTHONPATH", kScripts}}), kScripts);
  };
  TempDir other_logs;
  auto node0 = agent(0, preload, run->logs.path(), run->reports.path());
  ASSERT_TRUE(node0->WaitForOutputContains(
      preload ? "preload: local rank 0 spare" : "hosting the rendezvous", 60s))
      << node0->err();
  auto node1 = agent(1, false, other_logs.path(), run->other_reports.path());
  auto st0 = node0->Wait(180s);
  auto st1 = node1->Wait(60s);
  ASSERT_TRUE(st0.has_value()) << node0->err();
  ASSERT_TRUE(st1.has_value()) << node1->err();
  run->node0_exit = st0->exit_code;
  run->node0_err = node0->err();
}

// Every report, stderr log and error file of node 0 (rank 0) matches between the two runs.
void ExpectSameStarts(TwoNodeRun* cold, TwoNodeRun* warm, int attempts) {
  const std::string cold_root = RunDir(cold->logs.path());
  const std::string warm_root = RunDir(warm->logs.path());
  for (int attempt = 0; attempt < attempts; ++attempt) {
    SCOPED_TRACE(absl::StrCat("attempt ", attempt));
    const std::string name = absl::StrCat("/report-", attempt, "-0.json");
    const nlohmann::json a = LoadReport(cold->reports.path() + name, cold_root);
    const nlohmann::json b = LoadReport(warm->reports.path() + name, warm_root);
    EXPECT_EQ(a, b) << Differences(a, b);
    const std::string where = absl::StrCat("/attempt_", attempt, "/0/");
    EXPECT_EQ(ReadFile(cold_root + where + "stderr.log"),
              ReadFile(warm_root + where + "stderr.log"));
    EXPECT_EQ(ReadFile(cold_root + where + "stdout.log"),
              ReadFile(warm_root + where + "stdout.log"));
  }
}

// A spare that was ready before a start had torch imported already: the script's own
// `import torch` then costs nothing. (On a loaded machine a spare may still be importing at
// a restart; it is handed over all the same, and that start is not checked here.)
void ExpectFreeImportsFromReadySpares(const TwoNodeRun& warm) {
  const std::string& log = warm.node0_err;
  std::vector<size_t> starts;  // where each start's "... started from spares" line is
  for (size_t at = log.find("started from spares"); at != std::string::npos;
       at = log.find("started from spares", at + 1)) {
    starts.push_back(at);
  }
  int checked = 0;
  for (size_t attempt = 1; attempt < starts.size(); ++attempt) {
    // This start's spare was made after the previous start and must be ready before this one.
    const size_t ready = log.find("preload: local rank 0 spare", starts[attempt - 1]);
    if (ready == std::string::npos || ready > starts[attempt]) continue;
    double seconds = 1e9;
    ASSERT_TRUE(absl::SimpleAtod(
        ReadFile(absl::StrCat(warm.reports.path(), "/report-", attempt, "-0.import-seconds")),
        &seconds));
    EXPECT_LT(seconds, 0.05) << "attempt " << attempt;
    ++checked;
  }
  std::cout << checked << " restart(s) from a ready spare checked\n";
}

nlohmann::json ErrorFileWithoutTime(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(path));
  j["message"]["extraInfo"].erase("timestamp");
  return j;
}

TEST(PreloadTest, ScriptStartedFromSparesMatchesColdStartsAtFirstStartAndAfterRestarts) {
  // Attempt 0 exits 3, 1 raises, 2 exits with a message, 3 fails through torch's @record.
  const std::string plan = "wait=2,exit=3,wait=2,raise,wait=2,message=bye from rank 0,record";
  const std::vector<std::string> entry = {kScripts + "/preload_report.py"};
  TwoNodeRun cold, warm;
  RunTwoNodes(false, entry, plan, 3, &cold);
  RunTwoNodes(true, entry, plan, 3, &warm);
  EXPECT_EQ(cold.node0_exit, 1) << cold.node0_err;
  EXPECT_EQ(warm.node0_exit, 1) << warm.node0_err;
  // Every start of node 0, the first included, came from a spare.
  EXPECT_EQ(CountOccurrences(warm.node0_err, "preload: 1 of 1 worker(s) started from spares"), 4)
      << warm.node0_err;
  EXPECT_THAT(cold.node0_err, Not(HasSubstr("preload:")));
  ExpectSameStarts(&cold, &warm, 4);
  const std::string warm_root = RunDir(warm.logs.path());
  EXPECT_THAT(ReadFile(warm_root + "/attempt_1/0/stderr.log"),
              HasSubstr("RuntimeError: worker 0 failed on purpose"));
  EXPECT_EQ(ReadFile(warm_root + "/attempt_2/0/stderr.log"), "bye from rank 0\n");
  EXPECT_EQ(ErrorFileWithoutTime(RunDir(cold.logs.path()) + "/attempt_3/0/error.json"),
            ErrorFileWithoutTime(warm_root + "/attempt_3/0/error.json"));
  EXPECT_THAT(warm.node0_err, HasSubstr("exit code 3"));
  ExpectFreeImportsFromReadySpares(warm);
}

TEST(PreloadTest, ModuleStartedFromSparesMatchesColdStarts) {
  const std::vector<std::string> entry = {"-m", "preload_report"};
  TwoNodeRun cold, warm;
  RunTwoNodes(false, entry, "wait=2,raise,ok", 1, &cold);
  RunTwoNodes(true, entry, "wait=2,raise,ok", 1, &warm);
  EXPECT_EQ(cold.node0_exit, 0) << cold.node0_err;
  EXPECT_EQ(warm.node0_exit, 0) << warm.node0_err;
  EXPECT_EQ(CountOccurrences(warm.node0_err, "preload: 1 of 1 worker(s) started from spares"), 2)
      << warm.node0_err;
  ExpectSameStarts(&cold, &warm, 2);
  const nlohmann::json report =
      nlohmann::json::parse(ReadFile(warm.reports.path() + "/report-1-0.json"));
  EXPECT_EQ(report["__name__"], "__main__");
  EXPECT_EQ(report["argv"][0], kScripts + "/preload_report.py");
  EXPECT_EQ(report["orig_argv"][2], "-m");
}

// A script that needs nothing but Python, for the cases about ddprun's side.
std::string WriteScript(const TempDir& dir, const std::string& body) {
  const std::string path = dir.File("worker.py");
  testing::WriteFile(path, body);
  return path;
}

// Attempt 0 waits for the file GO_FILE (the test creates it once ddprun has said what the test
// waits for: a spare's verdict on a loaded machine may take a while), then fails; attempt 1
// succeeds.
constexpr char kFailOnceScript[] =
    "import os, sys, time\n"
    "print('rank', os.environ['RANK'], 'attempt', os.environ['TORCHELASTIC_RESTART_COUNT'],\n"
    "      'PYTHONPATH', os.environ.get('PYTHONPATH'), flush=True)\n"
    "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0':\n"
    "    while not os.path.exists(os.environ['GO_FILE']):\n"
    "        time.sleep(0.05)\n"
    "    sys.exit(1)\n";

// Runs ddprun on kFailOnceScript and lets attempt 0 fail once ddprun's stderr has `wait_for`.
std::optional<testing::ExitStatus> RunFailOnce(const TempDir& dir, std::vector<std::string> flags,
                                               std::map<std::string, std::string> env,
                                               const std::string& wait_for,
                                               std::unique_ptr<Subprocess>* out) {
  std::vector<std::string> argv = {BinPath("ddprun"), "--standalone", "--max-restarts=1"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(WriteScript(dir, kFailOnceScript));
  env["GO_FILE"] = dir.File("go");
  *out = std::make_unique<Subprocess>(argv, Env(env));
  const bool seen = (*out)->WaitForOutputContains(wait_for, 90s);
  testing::WriteFile(dir.File("go"), "");
  EXPECT_TRUE(seen) << "never saw: " << wait_for << "\n" << (*out)->err();
  return (*out)->Wait(60s);
}

TEST(PreloadTest, ModuleThatFailsToImportWarnsOnceNamingItAndWorkersStartCold) {
  TempDir dir;
  std::unique_ptr<Subprocess> run;
  auto st = RunFailOnce(dir, {"--nproc-per-node=2", "--preload=json,no_such_module_xyz"}, {},
                        "workers start cold from now on", &run);
  Subprocess& p = *run;
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_EQ(CountOccurrences(p.err(),
                             "WARNING: --preload=json,no_such_module_xyz: cannot import "
                             "no_such_module_xyz: ModuleNotFoundError: No module named "
                             "'no_such_module_xyz'; workers start cold from now on"),
            1)
      << p.err();
  EXPECT_EQ(CountOccurrences(p.err(), "preload: 0 of 2 worker(s) started from spares"), 2);
  EXPECT_THAT(p.out(), HasSubstr("rank 0 attempt 1 PYTHONPATH None"));
}

// The spare's hook stands in for sitecustomize; the one it shadows (here the user's, on
// PYTHONPATH, which prints and then fails) still runs at the start, after the hand-over, with
// site's own handling of its failure, as in a cold start.
TEST(PreloadTest, ShadowedSitecustomizeRunsAtTheStartAsInAColdStart) {
  TempDir dir;
  std::filesystem::create_directories(dir.File("site"));
  testing::WriteFile(dir.File("site/sitecustomize.py"),
                     "import os, sys\n"
                     "print('user sitecustomize, rank', os.environ.get('RANK'), file=sys.stderr)\n"
                     "raise ValueError('broken on purpose')\n");
  std::unique_ptr<Subprocess> run;
  auto st =
      RunFailOnce(dir, {"--preload=json"}, {{"PYTHONPATH", dir.File("site")}}, "spare (pid", &run);
  Subprocess& p = *run;
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_THAT(p.err(), HasSubstr("preload: 1 of 1 worker(s) started from spares")) << p.err();
  // Once per start (cold, then from the spare), with the start's own RANK.
  EXPECT_EQ(CountOccurrences(p.err(),
                             "user sitecustomize, rank 0\n"
                             "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                             "ValueError: broken on purpose\n"),
            2)
      << p.err();
  EXPECT_THAT(p.out(), HasSubstr("rank 0 attempt 1 PYTHONPATH " + dir.File("site")));
}

TEST(PreloadTest, SpareThatInitialisedCudaIsNeverHandedOver) {
  // A stand-in torch whose CUDA reports itself initialised, as a real one would after
  // torch.cuda.init() at import time.
  TempDir dir;
  std::filesystem::create_directories(dir.File("fake/torch"));
  testing::WriteFile(dir.File("fake/torch/__init__.py"),
                     "class cuda:\n    @staticmethod\n    def is_initialized():\n"
                     "        return True\n");
  std::unique_ptr<Subprocess> run;
  auto st = RunFailOnce(dir, {"--preload=torch"}, {{"PYTHONPATH", dir.File("fake")}},
                        "workers start cold from now on", &run);
  Subprocess& p = *run;
  ASSERT_TRUE(st.has_value()) << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.err();
  EXPECT_EQ(CountOccurrences(p.err(),
                             "--preload=torch: importing torch initialised CUDA before "
                             "the hand-over (torch.cuda is initialised); workers start "
                             "cold from now on"),
            1)
      << p.err();
  EXPECT_THAT(p.err(), Not(HasSubstr("1 of 1 worker(s) started from spares")));
  EXPECT_THAT(p.out(), HasSubstr("rank 0 attempt 1 PYTHONPATH " + dir.File("fake")));
}

TEST(PreloadTest, UnusablePreloadSettingsAreUsageErrorsNamingThem) {
  TempDir dir;
  const std::string script = WriteScript(dir, "pass\n");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--preload=torch", "--no-python", "/bin/true"},
       "--preload=torch: a --no-python program is not preloaded with Python modules; "
       "--preload=native if it takes ddprun's hand-over itself"},
      {{"--preload=torch,2d", script}, "--preload=torch,2d: '2d' is not a Python module name"},
      {{"--preload=torch..nn", script},
       "--preload=torch..nn: 'torch..nn' is not a Python module name"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {BinPath("ddprun"), "--standalone"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Subprocess p(argv, Env());
    auto st = p.Wait(20s);
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << p.err();
    EXPECT_THAT(p.err(), HasSubstr(c.message));
  }
}

// Issue 40: a --preload spare handed a start that ends, exit 0, without reading it never began
// that start: a failed worker, not the node's success. With no restart left the job fails; with
// one, the next start (cold or from a new spare) runs, and the job succeeds. The worker is
// fake_native_spare (tests/launcher/preload), a --preload=native program.
TEST(PreloadTest, SpareThatExitsZeroWithoutReadingItsHandOverIsAFailedWorker) {
  TempDir dir;
  for (int max_restarts : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("--max-restarts=", max_restarts));
    Subprocess p(
        {BinPath("ddprun"), "--standalone", absl::StrCat("--max-restarts=", max_restarts),
         "--preload=native", "--no-python", FAKE_NATIVE_SPARE},
        Env({{"FAKE_SPARE",
              max_restarts == 0 ? "unread" : absl::StrCat("unread-once:", dir.File("once"))}}));
    auto st = p.Wait(60s);
    ASSERT_TRUE(st.has_value()) << p.err();
    EXPECT_THAT(p.err(), HasSubstr("preload: 1 of 1 worker(s) started from spares"));
    EXPECT_THAT(p.err(), HasSubstr(") failed with exit code 0 before it started: it ended without "
                                   "reading the start handed to its --preload spare"));
    if (max_restarts == 0) {
      EXPECT_EQ(st->exit_code, 1) << p.err();
      EXPECT_THAT(p.err(), HasSubstr("exit:        exit code 0 before it started"));
    } else {
      EXPECT_EQ(st->exit_code, 0) << p.err();
      EXPECT_THAT(p.err(), HasSubstr(", restart 1"));
      EXPECT_THAT(p.out(), HasSubstr("worker MARK="));
    }
  }
}

// The children of `pid` (Linux's /proc/PID/task/PID/children).
std::set<pid_t> ChildrenOf(pid_t pid) {
  std::set<pid_t> out;
  const std::string text = ReadFile(absl::StrCat("/proc/", pid, "/task/", pid, "/children"));
  for (absl::string_view s : absl::StrSplit(text, ' ', absl::SkipWhitespace())) {
    int child = 0;
    if (absl::SimpleAtoi(s, &child)) out.insert(child);
  }
  return out;
}

std::string Comm(pid_t pid) {
  std::string c = ReadFile(absl::StrCat("/proc/", pid, "/comm"));
  if (!c.empty() && c.back() == '\n') c.pop_back();
  return c;
}

// Scheduling policy of each thread of `pid` (sched_getscheduler), by thread id.
std::map<pid_t, int> ThreadPolicies(pid_t pid) {
  std::map<pid_t, int> out;
  for (pid_t tid : launcher::ThreadsOf(pid)) {
    const int policy = sched_getscheduler(tid);
    if (policy >= 0) out[tid] = policy;
  }
  return out;
}

TEST(PreloadTest, SparesImportAtIdlePriorityAreReplacedWhenKilledAndDieWithDdprun) {
  TempDir dir;
  // A preload that takes a few seconds of CPU, long enough to be watched while it imports.
  testing::WriteFile(dir.File("slow_import.py"),
                     "import time\nt = time.time()\nwhile time.time() - t < 30:\n    pass\n");
  const std::string script =
      WriteScript(dir,
                  "import os, time\nopen(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\n"
                  "time.sleep(300)\n");
  auto ddprun = std::make_unique<Subprocess>(
      std::vector<std::string>{BinPath("ddprun"), "--standalone", "--preload=slow_import", script},
      Env({{"PYTHONPATH", dir.path()}, {"PID_FILE", dir.File("worker.pid")}}));
  const pid_t agent = ddprun->pid();
  pid_t worker = 0;
  ASSERT_TRUE(
      WaitUntil([&] { return absl::SimpleAtoi(ReadFile(dir.File("worker.pid")), &worker); }, 30s))
      << ddprun->err();
  auto spare = [&]() -> pid_t {
    for (pid_t child : ChildrenOf(agent)) {
      if (child != worker && Comm(child) == "python3") return child;
    }
    return 0;
  };
  // The import runs on a thread of its own at SCHED_IDLE (5); the main thread, which becomes
  // the worker's, stays SCHED_OTHER (0). (The first python3 child may be the short-lived
  // probe, so the spare is looked up again on every try.)
  pid_t first = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        first = spare();
        auto p = ThreadPolicies(first);
        return first > 0 && p.size() >= 2 && p[first] == 0 &&
               std::any_of(p.begin(), p.end(), [](const auto& t) { return t.second == 5; });
      },
      30s))
      << ddprun->err();

  kill(first, SIGKILL);
  ASSERT_TRUE(ddprun->WaitForOutputContains(absl::StrCat("the spare of local rank 0 (pid ", first,
                                                         ") ended (killed by signal 9); "
                                                         "starting another"),
                                            20s))
      << ddprun->err();
  pid_t second = 0;
  ASSERT_TRUE(WaitUntil([&] { return (second = spare()) > 0 && second != first; }, 20s));

  // However ddprun goes, its spares go with it.
  kill(agent, SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return !testing::ProcessAlive(second); }, 10s));
  EXPECT_TRUE(WaitUntil([&] { return !testing::ProcessAlive(worker); }, 10s));
}

// Without CAP_SYS_NICE ddprun may not give a spare's idle import thread normal priority back;
// a spare still importing at a start is then dropped and the worker starts cold (root only:
// the test runs ddprun as nobody through setpriv).
TEST(PreloadTest, SpareStillImportingWithoutCapSysNiceIsDroppedAndTheWorkerStartsCold) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run ddprun as another user";
  TempDir dir;
  chmod(dir.path().c_str(), 0777);
  testing::WriteFile(dir.File("slow_import.py"),
                     "import time\nt = time.time()\nwhile time.time() - t < 60:\n    pass\n");
  const std::string script = WriteScript(dir, kFailOnceScript);
  auto ddprun = std::make_unique<Subprocess>(
      std::vector<std::string>{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               BinPath("ddprun"), "--standalone", "--max-restarts=1",
                               "--preload=slow_import", script},
      Env({{"PYTHONPATH", dir.path()}, {"GO_FILE", dir.File("go")}, {"HOME", dir.path()}}));
  // setpriv execs ddprun in place: its children are ddprun's. Wait for a spare importing (two
  // threads: neither the worker nor the probe has a second one).
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (pid_t child : ChildrenOf(ddprun->pid())) {
          if (Comm(child) == "python3" && ThreadPolicies(child).size() >= 2) return true;
        }
        return false;
      },
      30s))
      << ddprun->err();
  testing::WriteFile(dir.File("go"), "");
  auto st = ddprun->Wait(60s);
  ASSERT_TRUE(st.has_value()) << ddprun->err();
  EXPECT_EQ(st->exit_code, 0) << ddprun->err();
  EXPECT_THAT(ddprun->err(),
              HasSubstr("preload: the spare of local rank 0 is still importing at idle priority "
                        "that ddprun may not raise (no CAP_SYS_NICE); starting this worker cold"));
  EXPECT_EQ(CountOccurrences(ddprun->err(), "preload: 0 of 1 worker(s) started from spares"), 2)
      << ddprun->err();
  EXPECT_THAT(ddprun->out(), HasSubstr("rank 0 attempt 1"));
}

// The rule that makes a spare safe: a module imported ahead of the start sees the node-level
// environment, so it must not read a per-start variable at import time. torch does not (here
// both Python's os.environ and the C library's getenv are watched while `import torch` runs);
// what it does read at import (thread counts, logging, oneDNN) is set on the node and the same
// for the spare as for a cold start.
TEST(PreloadTest, ImportingTorchReadsNoPerStartVariable) {
  TempDir dir;
  const std::string log = dir.File("getenv.log");
  const std::string watcher = dir.File("watch.py");
  testing::WriteFile(watcher,
                     "import os, sys\n"
                     "seen = set()\n"
                     "E = os._Environ\n"
                     "get, has = E.__getitem__, E.__contains__\n"
                     "E.__getitem__ = lambda self, k: (seen.add(k), get(self, k))[1]\n"
                     "E.__contains__ = lambda self, k: (seen.add(k), has(self, k))[1]\n"
                     "import torch\n"
                     "E.__getitem__, E.__contains__ = get, has\n"
                     "with open(sys.argv[1], 'a') as f:\n"
                     "    f.write(''.join(str(k) + '\\n' for k in seen))\n");
  Subprocess p({testing::SystemPython(), watcher, log},
               {{"LD_PRELOAD", BinPath("../tests/libgetenv_log.so")}, {"GETENV_LOG", log}});
  auto st = p.Wait(60s);
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << p.err();
  std::set<std::string> read;
  for (absl::string_view line : absl::StrSplit(ReadFile(log), '\n', absl::SkipEmpty())) {
    read.insert(std::string(line));
  }
  // Both watches work: OpenMP reads its thread count, torch's Python reads PYTORCH_JIT.
  EXPECT_TRUE(read.count("OMP_NUM_THREADS") > 0) << ReadFile(log);
  EXPECT_TRUE(read.count("PYTORCH_JIT") > 0) << ReadFile(log);
  for (const char* name : launcher::kPerStartVariables) {
    EXPECT_EQ(read.count(name), 0u) << name << " is read while torch is imported";
  }
}

}  // namespace
}  // namespace ddprun
