// ddp-train as a real process on real Fashion-MNIST (Debian's dataset-fashion-mnist, subsets so
// each case takes seconds): bad input, single process, two ranks under torchrun and ddprun,
// SIGTERM-and-resume with another world size, SIGKILL of a worker mid-run with the group
// restarting from the last checkpoint.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_lease_page.h"
#include "tests/testing/free_port.h"
#include "tests/testing/rdzv_daemon.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::trainer {
namespace {

using ::ddprun::testing::BinPath;
using ::ddprun::testing::ExitStatus;
using ::ddprun::testing::ReadFile;
using ::ddprun::testing::Subprocess;
using ::ddprun::testing::TempDir;
using ::ddprun::testing::WaitUntil;
using ::ddprun::testing::WriteFile;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

// The reference torchrun, as tests/integration finds it: $DDPRUN_TORCHRUN, else
// ../shared/tools/torchrun113 beside the checkout, else the repository's own wrapper of Debian's
// torchrun with the same Python 3.11 fix. Empty when none is usable.
std::string FindTorchrun() {
  const char* env = getenv("DDPRUN_TORCHRUN");
  if (env != nullptr) return env;
  for (const std::string& p :
       {::ddprun::testing::SourcePath("../shared/tools/torchrun113"),
        ::ddprun::testing::SourcePath("tests/integration/scripts/torchrun_py311.py")}) {
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// torchrun113 for one node and `nproc` workers on a rendezvous of its own.
std::vector<std::string> TorchrunArgv(int nproc, int max_restarts) {
  static int run = 0;
  return {FindTorchrun(),
          "--nnodes=1",
          "--nproc_per_node=" + std::to_string(nproc),
          "--rdzv_backend=c10d",
          "--rdzv_endpoint=127.0.0.1:" + std::to_string(::ddprun::testing::FreeLoopbackPort()),
          "--rdzv_id=ddp-train-test-" + std::to_string(getpid()) + "-" + std::to_string(++run),
          "--max_restarts=" + std::to_string(max_restarts),
          "--monitor_interval=0.1",
          "--no_python"};
}

std::vector<nlohmann::json> ReadMetrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

std::string Describe(Subprocess& p) { return "stdout:\n" + p.out() + "\nstderr:\n" + p.err(); }

// The pid of a descendant of `ancestor` whose command line mentions ddp-train and whose
// environment has RANK=<rank>.
std::optional<pid_t> FindWorker(pid_t ancestor, int rank) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") == std::string::npos) pids.push_back(std::stoi(name));
  }
  auto parent_of = [](pid_t pid) -> pid_t {
    std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    return ppid;
  };
  const std::string want = "RANK=" + std::to_string(rank);
  for (pid_t pid : pids) {
    const std::string dir = "/proc/" + std::to_string(pid);
    if (!absl::StrContains(ReadFile(dir + "/cmdline"), "ddp-train")) continue;
    bool has_rank = false;
    for (absl::string_view kv : absl::StrSplit(ReadFile(dir + "/environ"), '\0')) {
      if (kv == want) has_rank = true;
    }
    if (!has_rank) continue;
    for (pid_t p = pid; p > 1; p = parent_of(p)) {
      if (p == ancestor) return pid;
    }
  }
  return std::nullopt;
}

class DdpTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Exists(kData)) GTEST_SKIP() << kData << " missing (apt-get install dataset-fashion-mnist)";
    ASSERT_TRUE(Exists(BinPath("ddp-train"))) << BinPath("ddp-train");
  }

  std::vector<std::string> Train(std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinPath("ddp-train"), "mnist",         "--data", kData,
                                     "--no-progress-bar",  "--test-subset", "1000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  // Environment that makes a ddp-train started directly a single process, whatever the test
  // runner's environment holds.
  std::map<std::string, std::string> Solo() {
    return {{"RANK", "\x01unset"},
            {"WORLD_SIZE", "\x01unset"},
            {"SLURM_PROCID", "\x01unset"},
            {"TORCHELASTIC_ERROR_FILE", dir_.File("error.json")},
            {"TORCHELASTIC_RESTART_COUNT", "\x01unset"},
            {"DDPRUN_PROGRESS_FILE", "\x01unset"},
            {"OMP_NUM_THREADS", "1"}};
  }

  // Rank `rank` of two started by hand (no launcher), meeting at 127.0.0.1:`port`.
  std::map<std::string, std::string> RankOfTwo(int rank, const std::string& port) {
    std::map<std::string, std::string> env = Solo();
    env["RANK"] = std::to_string(rank);
    env["WORLD_SIZE"] = "2";
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = port;
    return env;
  }

  TempDir dir_;
};

TEST_F(DdpTrainTest, MissingDataDirectoryNamedAndErrorFileWritten) {
  Subprocess p({BinPath("ddp-train"), "mnist", "--data", dir_.File("nope")}, Solo());
  std::optional<ExitStatus> st = p.Wait(seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2) << Describe(p);
  EXPECT_THAT(p.err(), HasSubstr(dir_.File("nope")));
  nlohmann::json j = nlohmann::json::parse(ReadFile(dir_.File("error.json")));
  EXPECT_THAT(j["message"]["message"].get<std::string>(), HasSubstr(dir_.File("nope")));
  EXPECT_TRUE(j["message"]["extraInfo"].contains("timestamp"));
}

TEST_F(DdpTrainTest, TruncatedDataFileNamed) {
  const std::string data = dir_.File("data");
  mkdir(data.c_str(), 0755);
  for (const char* f :
       {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz"}) {
    ASSERT_EQ(symlink((std::string(kData) + "/" + f).c_str(), (data + "/" + f).c_str()), 0);
  }
  const std::string labels = ReadFile(std::string(kData) + "/t10k-labels-idx1-ubyte.gz");
  WriteFile(data + "/t10k-labels-idx1-ubyte.gz", labels.substr(0, labels.size() / 2));
  Subprocess p({BinPath("ddp-train"), "mnist", "--data", data}, Solo());
  std::optional<ExitStatus> st = p.Wait(seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2) << Describe(p);
  EXPECT_THAT(p.err(), HasSubstr("t10k-labels-idx1-ubyte.gz"));
  EXPECT_THAT(p.out(), ::testing::Not(HasSubstr("Train Epoch")));
}

TEST_F(DdpTrainTest, UnwritableCheckpointDirectoryRefusedBeforeTraining) {
  WriteFile(dir_.File("file"), "x");
  Subprocess p(Train({"--checkpoint-dir", dir_.File("file/ckpt")}), Solo());
  std::optional<ExitStatus> st = p.Wait(seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2) << Describe(p);
  EXPECT_THAT(p.err(), HasSubstr(dir_.File("file/ckpt")));
  EXPECT_THAT(p.out(), ::testing::Not(HasSubstr("Train Epoch")));
}

TEST_F(DdpTrainTest, BadFlagIsUsageError) {
  Subprocess p({BinPath("ddp-train"), "mnist", "--data", kData, "--batch-size", "0"}, Solo());
  std::optional<ExitStatus> st = p.Wait(seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2) << Describe(p);
  EXPECT_THAT(p.err(), HasSubstr("--batch-size"));
  nlohmann::json j = nlohmann::json::parse(ReadFile(dir_.File("error.json")));
  EXPECT_THAT(j["message"]["message"].get<std::string>(), HasSubstr("--batch-size"));
}

TEST_F(DdpTrainTest, BadFaultIsUsageError) {
  Subprocess p(Train({"--fault=hang@3:-1"}), Solo());
  std::optional<ExitStatus> st = p.Wait(seconds(30));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 2) << Describe(p);
  EXPECT_THAT(p.err(), HasSubstr("--fault: 'hang@3:-1' is not hang@STEP:RANK"));
  // A test hook, not a training option: --help does not list it.
  Subprocess help({BinPath("ddp-train"), "mnist", "--help"}, Solo());
  ASSERT_TRUE(help.Wait(seconds(30)).has_value());
  EXPECT_THAT(help.out(), HasSubstr("--max-steps"));
  EXPECT_THAT(help.out(), ::testing::Not(HasSubstr("--fault")));
}

// The fault fires on a group's first attempt only: a restarted one trains to the end.
TEST_F(DdpTrainTest, FaultIgnoredAfterARestart) {
  std::map<std::string, std::string> env = Solo();
  env["TORCHELASTIC_RESTART_COUNT"] = "1";
  Subprocess p(
      Train({"--epochs", "1", "--train-subset", "640", "--max-steps", "3", "--fault=hang@2:0"}),
      env);
  std::optional<ExitStatus> st = p.Wait(seconds(60));
  ASSERT_TRUE(st.has_value()) << Describe(p);
  EXPECT_EQ(st->exit_code, 0) << Describe(p);
  EXPECT_THAT(p.err(), ::testing::Not(HasSubstr("fault injection")));
}

// Step reports ({"pid":P,"step":S} lines) from the ranks, read from a FIFO as ddprun's agent
// does.
class StepReportReader {
 public:
  explicit StepReportReader(const std::string& fifo) {
    EXPECT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    // Open before the workers start: their non-blocking open needs a reader.
    fd_ = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    EXPECT_GE(fd_, 0);
  }
  ~StepReportReader() { close(fd_); }

  // Takes whatever arrived; returns the steps each pid reported so far, in order.
  const std::map<pid_t, std::vector<int64_t>>& Poll() {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof(buf))) > 0) pending_.append(buf, static_cast<size_t>(n));
    for (size_t eol; (eol = pending_.find('\n')) != std::string::npos;) {
      nlohmann::json j = nlohmann::json::parse(pending_.substr(0, eol));
      steps_[j["pid"].get<pid_t>()].push_back(j["step"].get<int64_t>());
      pending_.erase(0, eol + 1);
      ++lines_;
    }
    return steps_;
  }
  int lines() const { return lines_; }

 private:
  int fd_ = -1;
  std::string pending_;
  std::map<pid_t, std::vector<int64_t>> steps_;
  int lines_ = 0;
};

// --fault=hang@3:1: both ranks report their start (step 0) and steps 1..3; then rank 1 hangs
// (and says so) and rank 0 waits for it in step 4's all-reduce, so no report arrives while
// both stay alive, as with a rank stuck in a collective. The hung rank ignores SIGTERM (a stop
// request) and dies to SIGKILL.
TEST_F(DdpTrainTest, FaultHangsOneRankAndTheStepReportsStop) {
  StepReportReader reports(dir_.File("progress"));
  const std::string port = std::to_string(::ddprun::testing::FreeLoopbackPort());
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> env = RankOfTwo(r, port);
    env["DDPRUN_PROGRESS_FILE"] = dir_.File("progress");
    // 1280 images / 2 ranks / 64 per batch: 10 steps, were it not for the fault.
    ranks.push_back(std::make_unique<Subprocess>(
        Train({"--epochs", "1", "--train-subset", "1280", "--fault=hang@3:1"}), env));
  }
  const pid_t pid0 = ranks[0]->pid(), pid1 = ranks[1]->pid();
  auto reported = [&](pid_t pid) {
    auto it = reports.Poll().find(pid);
    return it == reports.Poll().end() ? std::vector<int64_t>{} : it->second;
  };
  ASSERT_TRUE(WaitUntil([&] { return reported(pid0).size() >= 5 && reported(pid1).size() >= 4; },
                        seconds(60)))
      << Describe(*ranks[0]) << Describe(*ranks[1]);
  ASSERT_TRUE(ranks[1]->WaitForOutputContains(
      "ddp-train: rank 1: fault injection: hanging at step 3", seconds(10)))
      << Describe(*ranks[1]);
  EXPECT_THAT(ranks[0]->err(), ::testing::Not(HasSubstr("fault injection")));
  ranks[1]->Signal(SIGTERM);
  // Steps take milliseconds here: two seconds without a report means no rank is progressing.
  EXPECT_FALSE(WaitUntil([&] { return reports.Poll(), reports.lines() > 9; }, seconds(2)));
  // Each report says "starting step N" (0: the start): rank 1 hung after step 3; rank 0 started
  // step 4 and waits in its collective, one step ahead of the straggler.
  EXPECT_EQ(reported(pid0), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(reported(pid1), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(reports.lines(), 9);
  EXPECT_TRUE(ranks[0]->running()) << Describe(*ranks[0]);
  EXPECT_TRUE(ranks[1]->running()) << Describe(*ranks[1]);
  for (const auto& rank : ranks) {
    rank->Signal(SIGKILL);
    std::optional<ExitStatus> st = rank->Wait(seconds(10));
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->signal, SIGKILL);
  }
  for (pid_t pid : {pid0, pid1}) EXPECT_FALSE(::ddprun::testing::ProcessAlive(pid));
}

TEST_F(DdpTrainTest, SingleProcessLearnsAndWritesMetrics) {
  Subprocess p(
      Train({"--epochs", "2", "--train-subset", "1280", "--metrics-file", dir_.File("m.jsonl"),
             "--save-model", "--save-model-path", dir_.File("model.pt")}),
      Solo());
  std::optional<ExitStatus> st = p.Wait(seconds(120));
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << Describe(p);
  std::vector<nlohmann::json> m = ReadMetrics(dir_.File("m.jsonl"));
  ASSERT_EQ(m.size(), 2u) << ReadFile(dir_.File("m.jsonl"));
  EXPECT_EQ(m[1]["epoch"], 2);
  EXPECT_EQ(m[1]["world_size"], 1);
  EXPECT_DOUBLE_EQ(m[1]["lr"].get<double>(), 0.7);
  EXPECT_GT(m[1]["test_acc"].get<double>(), 0.5);  // 10 classes: chance is 0.1
  EXPECT_LT(m[1]["train_loss"].get<double>(), m[0]["train_loss"].get<double>());
  EXPECT_TRUE(Exists(dir_.File("model.pt")));

  // The plot command draws this run (and the same file again as a second run) into a PNG.
  Subprocess plot({::ddprun::testing::SystemPython(),
                   ::ddprun::testing::SourcePath("scripts/plot_metrics.py"), "-o",
                   dir_.File("curves.png"), "--label", "run a", dir_.File("m.jsonl"), "--label",
                   "run b", dir_.File("m.jsonl")});
  std::optional<ExitStatus> pst = plot.Wait(seconds(120));
  ASSERT_TRUE(pst.has_value());
  if (pst->exit_code != 0 && absl::StrContains(plot.err(), "No module named 'matplotlib'")) {
    GTEST_SKIP() << "python3-matplotlib not installed";
  }
  ASSERT_EQ(pst->exit_code, 0) << Describe(plot);
  EXPECT_EQ(ReadFile(dir_.File("curves.png")).substr(0, 4), "\x89PNG");
}

// SIGTERM mid-epoch: finish the step, checkpoint, exit 143. Then resume the same run with two
// ranks under torchrun: the second run starts at the saved sample offset and finishes.
TEST_F(DdpTrainTest, SigtermCheckpointsThenResumesWithAnotherWorldSize) {
  const std::string torchrun = FindTorchrun();
  const std::string ckpt = dir_.File("ckpt");
  const std::vector<std::string> args = {"--epochs",         "1",
                                         "--train-subset",   "3840",
                                         "--checkpoint-dir", ckpt,
                                         "--log-interval",   "5",
                                         "--metrics-file",   dir_.File("m.jsonl")};
  {
    Subprocess p(Train(args), Solo());
    ASSERT_TRUE(p.WaitForOutputContains("Train Epoch: 1 [640/", seconds(120))) << Describe(p);
    p.Signal(SIGTERM);
    std::optional<ExitStatus> st = p.Wait(seconds(60));
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 143) << Describe(p);
    EXPECT_THAT(p.out(), HasSubstr("stop requested (signal 15)"));
    EXPECT_THAT(p.out(), HasSubstr("checkpoint: saved step"));
    EXPECT_TRUE(Exists(ckpt + "/LATEST"));
  }
  if (torchrun.empty()) GTEST_SKIP() << "torchrun113 not found";
  std::vector<std::string> argv = TorchrunArgv(2, 0);
  std::vector<std::string> train = Train(args);
  argv.insert(argv.end(), train.begin(), train.end());
  Subprocess p(argv, {{"TORCHELASTIC_ERROR_FILE", "\x01unset"}});
  std::optional<ExitStatus> st = p.Wait(seconds(180));
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << Describe(p);
  EXPECT_THAT(p.out(), HasSubstr("(saved by world size 1)"));
  EXPECT_THAT(p.out(), ::testing::Not(HasSubstr("sample offset 0,")));
  std::vector<nlohmann::json> m = ReadMetrics(dir_.File("m.jsonl"));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["world_size"], 2);
  EXPECT_TRUE(m[0]["resumed"].get<bool>());
  // The resumed part covers only what was left of the 3840 samples.
  EXPECT_LT(m[0]["samples"].get<int64_t>(), 3840);
  EXPECT_GT(m[0]["test_acc"].get<double>(), 0.5);
}

// ddprun's local lease (DDPRUN_LEASE_FD; trainer/io/commit_guard.h): steps and checkpoints are
// committed while it is valid, and not one past it: no checkpoint file nor pointer is written
// after valid_until, and ddp-train exits 75 naming the step it did not commit.
TEST_F(DdpTrainTest, PastItsLocalLeaseNothingIsCommittedAndItExits75) {
  // The agent's page (common/lease_page.h), inherited at its number.
  testing::FakeLeasePage lease;
  ASSERT_TRUE(lease.ok());
  constexpr int64_t kLeaseNs = 6'000'000'000;  // training the whole set takes longer
  const auto expires = std::chrono::system_clock::now() + std::chrono::nanoseconds(kLeaseNs);
  const int64_t until = MonotonicNowNs() + kLeaseNs;
  lease.SetValidUntil(until);
  std::map<std::string, std::string> env = Solo();
  env["DDPRUN_LEASE_FD"] = std::to_string(lease.fd());
  const std::string ckpt = dir_.File("ckpt");
  Subprocess p(Train({"--epochs", "1", "--checkpoint-dir", ckpt, "--checkpoint-every", "1"}), env);
  std::optional<ExitStatus> st = p.Wait(seconds(120));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 75) << Describe(p);
  EXPECT_THAT(p.err(), HasSubstr("not committing step"));
  EXPECT_THAT(p.err(), HasSubstr("local lease expired"));
  ASSERT_TRUE(Exists(ckpt + "/LATEST")) << "nothing was committed while the lease was valid";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt)) {
    ++files;
    const auto written = std::filesystem::last_write_time(entry.path());
    const auto written_at = std::chrono::system_clock::now() +
                            (written - std::filesystem::file_time_type::clock::now());
    // One save that passed the check just before the end may still be finishing (ms).
    EXPECT_LT(written_at, expires + std::chrono::milliseconds(500))
        << entry.path() << " written after the lease";
  }
  EXPECT_GT(files, 1);
}

// The newest checkpoint is torn (cut short, as by a crash of an unsynced copy): the next run
// warns, skips it and resumes from the one before.
TEST_F(DdpTrainTest, TornNewestCheckpointSkippedOnResume) {
  const std::string ckpt = dir_.File("ckpt");
  const std::vector<std::string> args = {"--epochs",           "1",  "--train-subset",     "640",
                                         "--checkpoint-dir",   ckpt, "--checkpoint-every", "2",
                                         "--keep-checkpoints", "5"};
  {
    Subprocess p(Train(args), Solo());
    std::optional<ExitStatus> st = p.Wait(seconds(120));
    ASSERT_TRUE(st.has_value());
    ASSERT_EQ(st->exit_code, 0) << Describe(p);
  }
  const std::string newest = ckpt + "/ckpt-000000000010.ddpt";
  ASSERT_TRUE(Exists(newest));
  const std::string bytes = ReadFile(newest);
  WriteFile(newest, bytes.substr(0, bytes.size() / 3));
  std::vector<std::string> more = args;
  more[1] = "2";  // --epochs 2: one more epoch to train after the resume
  Subprocess p(Train(more), Solo());
  std::optional<ExitStatus> st = p.Wait(seconds(120));
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << Describe(p);
  EXPECT_THAT(p.out(), HasSubstr("warning: skipping checkpoint: " + newest));
  EXPECT_THAT(p.out(), HasSubstr("checkpoint: read " + ckpt + "/ckpt-000000000008.ddpt"));
  EXPECT_THAT(p.out(), HasSubstr("resumed from checkpoint: epoch 1, sample offset 512, step 8"));
}

// Two ranks started by hand with different learning rates: the per-epoch replica check must
// catch the divergence on every rank (exit 1, the same story on both).
TEST_F(DdpTrainTest, DivergedReplicasDetected) {
  const std::string port = std::to_string(::ddprun::testing::FreeLoopbackPort());
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> env = RankOfTwo(r, port);
    env["TORCHELASTIC_ERROR_FILE"] = dir_.File("error" + std::to_string(r) + ".json");
    ranks.push_back(std::make_unique<Subprocess>(
        Train({"--epochs", "1", "--train-subset", "640", "--lr", r == 0 ? "1.0" : "0.5"}), env));
  }
  for (int r = 0; r < 2; ++r) {
    std::optional<ExitStatus> st = ranks[r]->Wait(seconds(120));
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 1) << Describe(*ranks[r]);
    EXPECT_THAT(ranks[r]->err(), HasSubstr("the replicas diverged"));
    EXPECT_THAT(ReadFile(dir_.File("error" + std::to_string(r) + ".json")),
                HasSubstr("replicas diverged"));
  }
  EXPECT_THAT(ranks[1]->err(), HasSubstr("parameter conv1.weight differs from rank 0"));
}

class LauncherTest : public DdpTrainTest, public ::testing::WithParamInterface<std::string> {
 protected:
  // The launcher command line up to and including the worker binary's arguments.
  std::vector<std::string> Launch(int max_restarts, const std::vector<std::string>& args) {
    std::vector<std::string> argv;
    if (GetParam() == "torchrun") {
      argv = TorchrunArgv(2, max_restarts);
    } else {
      argv = {BinPath("ddprun"), "--standalone", "--nproc-per-node=2",
              "--max-restarts=" + std::to_string(max_restarts), "--no-python"};
    }
    std::vector<std::string> train = Train(args);
    argv.insert(argv.end(), train.begin(), train.end());
    return argv;
  }
  void SetUp() override {
    DdpTrainTest::SetUp();
    if (IsSkipped()) return;
    if (GetParam() == "torchrun" && FindTorchrun().empty()) GTEST_SKIP() << "no torchrun113";
    if (GetParam() == "ddprun" && !Exists(BinPath("ddprun"))) {
      GTEST_SKIP() << BinPath("ddprun") << " not built yet";
    }
  }
};

TEST_P(LauncherTest, TwoRanksTrainTogether) {
  Subprocess p(Launch(0, {"--epochs", "1", "--train-subset", "2560", "--metrics-file",
                          dir_.File("m.jsonl")}),
               {{"TORCHELASTIC_ERROR_FILE", "\x01unset"}});
  std::optional<ExitStatus> st = p.Wait(seconds(180));
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << Describe(p);
  std::vector<nlohmann::json> m = ReadMetrics(dir_.File("m.jsonl"));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["world_size"], 2);
  EXPECT_EQ(m[0]["samples"], 2560);
  EXPECT_GT(m[0]["test_acc"].get<double>(), 0.5);
  EXPECT_THAT(p.out(), HasSubstr("world_size 2"));
  // Both ranks compared their parameters with rank 0's after the epoch.
  EXPECT_THAT(p.out(), HasSubstr("replicas in sync: 8 parameter tensors identical on 2 ranks"));
}

// SIGKILL one worker mid-epoch: the launcher restarts the group (restart budget 1) and the new
// round resumes from the last checkpoint, not from step 0, and reaches a normal accuracy.
TEST_P(LauncherTest, KilledWorkerGroupRestartsFromCheckpoint) {
  auto args = [&](const std::string& name) {
    return std::vector<std::string>{"--epochs",           "2",
                                    "--train-subset",     "3200",
                                    "--checkpoint-dir",   dir_.File(name + "-ckpt"),
                                    "--checkpoint-every", "5",
                                    "--metrics-file",     dir_.File(name + ".jsonl")};
  };
  // The same run without interruption, for the accuracy to compare with.
  {
    Subprocess ref(Launch(0, args("ref")), {{"TORCHELASTIC_ERROR_FILE", "\x01unset"}});
    std::optional<ExitStatus> st = ref.Wait(seconds(180));
    ASSERT_TRUE(st.has_value());
    ASSERT_EQ(st->exit_code, 0) << Describe(ref);
  }
  std::vector<nlohmann::json> ref = ReadMetrics(dir_.File("ref.jsonl"));
  ASSERT_EQ(ref.size(), 2u);

  Subprocess p(Launch(1, args("killed")), {{"TORCHELASTIC_ERROR_FILE", "\x01unset"}});
  // Epoch 2 has begun and a mid-epoch checkpoint exists: kill rank 1 there.
  ASSERT_TRUE(p.WaitForOutputContains("checkpoint: saved step 30 ", seconds(180))) << Describe(p);
  std::optional<pid_t> victim;
  ASSERT_TRUE(WaitUntil([&] { return (victim = FindWorker(p.pid(), 1)).has_value(); },
                        std::chrono::seconds(10)));
  ASSERT_EQ(kill(*victim, SIGKILL), 0);
  std::optional<ExitStatus> st = p.Wait(seconds(240));
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << Describe(p);
  const std::string out = p.out();
  EXPECT_THAT(out, HasSubstr("resumed from checkpoint: epoch 2"));
  EXPECT_THAT(out, HasSubstr("restart 1"));
  std::vector<nlohmann::json> m = ReadMetrics(dir_.File("killed.jsonl"));
  ASSERT_EQ(m.size(), 2u) << ReadFile(dir_.File("killed.jsonl"));
  EXPECT_EQ(m[1]["epoch"], 2);
  EXPECT_TRUE(m[1]["resumed"].get<bool>());
  // Work done before the kill is not repeated: 2 epochs x 3200 samples / (64 x 2) = 50 steps.
  EXPECT_EQ(m[1]["global_step"], 50);
  // Same world size, same data order, optimizer state and RNG restored: the resumed run ends
  // exactly where the uninterrupted one does (bit-identical here; one intra-op thread, a sum of
  // two values is order-independent), so the tolerance is tight.
  std::cout << "uninterrupted: " << ref[1].dump() << "\nkilled+resumed: " << m[1].dump()
            << std::endl;
  EXPECT_NEAR(m[1]["test_acc"].get<double>(), ref[1]["test_acc"].get<double>(), 0.002);
  EXPECT_NEAR(m[1]["test_loss"].get<double>(), ref[1]["test_loss"].get<double>(), 1e-4);
  EXPECT_NEAR(m[1]["train_loss"].get<double>(), ref[1]["train_loss"].get<double>(), 1e-4);
  EXPECT_GT(m[1]["test_acc"].get<double>(), 0.6);
}

// A hung collective across two agents (2 x 2 workers, the built-in rendezvous server): global
// rank 3 stops after step 5 and prints nothing; its peers wait for it in step 6's all-reduce.
// --hang-timeout catches it on both nodes, both take their workers' stacks, every node names
// rank 3 the straggler, the job restarts from the step-4 checkpoint and ends with the same
// parameters, bit for bit, as a run that never hung.
TEST_F(DdpTrainTest, HungCollectiveAcrossTwoAgentsIsDetectedRestartedAndBitIdentical) {
  if (!Exists(BinPath("ddprun")) || !Exists(BinPath("ddprun-rdzv"))) {
    GTEST_SKIP() << "ddprun not built yet";
  }
  const std::string token = "hang-test";
  ::ddprun::testing::RdzvDaemon daemon(token);
  ASSERT_FALSE(daemon.endpoint().empty()) << daemon.error();
  // Above the job's longest silent phase on a loaded 2-core CI machine (start-up: LibTorch,
  // data, gloo), as a user would choose it above theirs.
  constexpr int kTimeoutS = 10;
  // 2560 images / 4 ranks / 64 per batch: 10 steps in one epoch.
  auto start = [&](const std::string& name, const std::string& fault) {
    std::filesystem::create_directories(dir_.File(name));
    std::vector<std::unique_ptr<Subprocess>> agents;
    for (int node = 0; node < 2; ++node) {
      std::vector<std::string> argv = {
          BinPath("ddprun"),
          "--nnodes=2",
          "--nproc-per-node=2",
          "--max-restarts=1",
          "--rdzv-backend=c10d",
          "--rdzv-endpoint=" + daemon.endpoint(),
          "--rdzv-id=" + name,
          "--rdzv-conf=keep_alive_interval=0.5",
          "--hang-timeout=" + std::to_string(kTimeoutS),
          "--log-dir=" + dir_.File(name + "-logs" + std::to_string(node)),
          "--no-python"};
      std::vector<std::string> train =
          Train({"--epochs", "1", "--train-subset", "2560", "--checkpoint-dir",
                 dir_.File(name + "-ckpt"), "--checkpoint-every", "2", "--save-model",
                 // One file name: torch names the archive inside after it.
                 "--save-model-path", dir_.File(name + "/model.pt"), "--metrics-file",
                 dir_.File(name + ".jsonl")});
      if (!fault.empty()) train.push_back(fault);
      argv.insert(argv.end(), train.begin(), train.end());
      agents.push_back(std::make_unique<Subprocess>(
          argv, std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", token},
                                                   {"TORCHELASTIC_ERROR_FILE", "\x01unset"}}));
    }
    return agents;
  };
  {
    auto ref = start("ref", "");
    ASSERT_TRUE(::ddprun::testing::ExpectAllExit(ref, 0, seconds(180)));
  }
  auto agents = start("hang", "--fault=hang@5:3");
  // The fault fires on whichever node holds global rank 3; then both nodes must react.
  std::optional<std::chrono::steady_clock::time_point> fault_at;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const auto& a : agents) {
          if (absl::StrContains(a->out() + a->err(), "fault injection: hanging at step 5")) {
            fault_at = std::chrono::steady_clock::now();
          }
        }
        return fault_at.has_value();
      },
      seconds(180)));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return absl::StrContains(agents[0]->err(), "taking the stacks of this node's workers") &&
               absl::StrContains(agents[1]->err(), "taking the stacks of this node's workers");
      },
      seconds(30)));
  const double detected_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - *fault_at).count();
  std::cout << "fault seen by the test -> stacks being taken on both nodes: " << detected_s
            << " s (timeout " << kTimeoutS << " s)" << std::endl;
  // Timeout + 1 s is the target (bench/hang_bench.py measures it); + 2 s leaves room for this
  // test's own polling on a loaded 2-core CI machine.
  EXPECT_LT(detected_s, kTimeoutS + 2.0);
  ASSERT_TRUE(::ddprun::testing::ExpectAllExit(agents, 0, seconds(180)));
  for (int node = 0; node < 2; ++node) {
    const std::string err = agents[node]->err();
    EXPECT_THAT(err, HasSubstr("straggler of the hang (lowest step, then oldest progress, all "
                               "nodes): rank 3 on "))
        << err;
    int stacks = 0;
    for (const auto& run :
         std::filesystem::directory_iterator(dir_.File("hang-logs" + std::to_string(node)))) {
      for (int lr : {0, 1}) {
        const std::string text =
            ReadFile(run.path().string() + "/attempt_0/" + std::to_string(lr) + "/stacks.txt");
        if (text.empty()) continue;
        ++stacks;
        EXPECT_THAT(text, HasSubstr("#0 ")) << text;  // native frames of ddp-train's threads
      }
    }
    EXPECT_EQ(stacks, 2) << err;
  }
  // Rank 0 (on either node) resumed from the step-4 checkpoint, redoing steps 5 and 6 only.
  EXPECT_THAT(agents[0]->out() + agents[1]->out(), HasSubstr("resumed from checkpoint"));
  // The final parameters: both runs saved them the same way; equal bytes, equal parameters.
  std::cout << "uninterrupted: " << ReadFile(dir_.File("ref.jsonl"))
            << "hung+restarted: " << ReadFile(dir_.File("hang.jsonl")) << std::endl;
  const std::string ref_model = ReadFile(dir_.File("ref/model.pt"));
  ASSERT_FALSE(ref_model.empty());
  EXPECT_TRUE(ref_model == ReadFile(dir_.File("hang/model.pt")))
      << "the restarted run's final model differs from the uninterrupted run's";
}

// SIGTERM to the launcher: it forwards SIGTERM to both workers, which agree on a step, save one
// checkpoint (rank 0) and exit; a later run resumes from it.
TEST_P(LauncherTest, SigtermToLauncherSavesCheckpoint) {
  const std::string ckpt = dir_.File("ckpt");
  Subprocess p(Launch(0, {"--epochs", "1", "--train-subset", "12800", "--checkpoint-dir", ckpt,
                          "--log-interval", "5"}),
               {{"TORCHELASTIC_ERROR_FILE", "\x01unset"}});
  ASSERT_TRUE(p.WaitForOutputContains("Train Epoch: 1 [1280/", seconds(180))) << Describe(p);
  std::optional<pid_t> w0 = FindWorker(p.pid(), 0), w1 = FindWorker(p.pid(), 1);
  ASSERT_TRUE(w0.has_value() && w1.has_value());
  p.Signal(SIGTERM);
  std::optional<ExitStatus> st = p.Wait(seconds(120));
  ASSERT_TRUE(st.has_value());
  EXPECT_FALSE(st->exited() && st->exit_code == 0) << Describe(p);
  EXPECT_THAT(p.out(), HasSubstr("stop requested (signal 15)")) << Describe(p);
  EXPECT_THAT(p.out(), HasSubstr("(stop, epoch 1 offset")) << Describe(p);
  EXPECT_TRUE(Exists(ckpt + "/LATEST"));
  for (pid_t w : {*w0, *w1}) {  // no worker left behind
    EXPECT_TRUE(WaitUntil([w] { return !::ddprun::testing::ProcessAlive(w); }, seconds(10)));
  }
}

INSTANTIATE_TEST_SUITE_P(Launchers, LauncherTest, ::testing::Values("torchrun", "ddprun"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ddprun::trainer
