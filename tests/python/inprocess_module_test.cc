// python/ddprun_inprocess.py with real Python gloo workers (Debian's python3 and torch 1.13),
// the test playing the agent over a real control socket with the C++ wire format
// (control/control_message.h). The module the workers import is the one compiled into ddprun
// (kInProcessModuleSource), written out as the agent will write it.
//
// Each worker runs tests/python/scripts/inprocess_worker.py: a tiny deterministic DDP job whose
// final parameters and momenta, bit for bit, show whether a step was lost or repeated. With
// --hostile, a worker lies in the state agreement (tests/python/scripts/hostile_peer.py).
// Workers run Debian's python3 (torch 1.13; DDPRUN_TEST_PYTHON overrides it, e.g. with the torch
// 2.11 venv's python to run them all with 2.11); the tests named ...Torch211 run torch 2.11's.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/median.h"
#include "control/control_message.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "python/inprocess_module_py.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"
#include "tests/testing/torch2.h"

namespace ddprun {
namespace {

using control::AbortMessage;
using control::ControlMessage;
using control::HelloMessage;
using control::ReadyMessage;
using control::RoundMessage;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ReadFile;
using testing::ReservedPort;
using testing::Subprocess;
using testing::TempDir;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 12;
constexpr int kHoldAt = 4;  // the victim stops after this step; its peers block in the next
constexpr char kHugeStep[] = "1000000000000000";  // hostile_peer.py's claim

#define USE_TORCH211()                                     \
  const testing::Torch2& t2 = testing::FindTorch2();       \
  if (!t2.opted_out.empty()) GTEST_SKIP() << t2.opted_out; \
  ASSERT_TRUE(t2.error.empty()) << t2.error;               \
  python_ = t2.python

// One accepted control connection, read line by line with deadlines.
class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel() { close(fd_); }

  // The next line without its '\n'; nullopt at EOF or after `timeout`.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // The next message, parsed by the agent's own parser; a failure names what came instead.
  template <typename T>
  T Read(std::chrono::milliseconds timeout = 30s) {
    std::optional<std::string> line = ReadLine(timeout);
    if (!line) {
      ADD_FAILURE() << "no message within " << timeout.count() << " ms";
      return T{};
    }
    absl::StatusOr<ControlMessage> m = control::ParseControlMessage(*line);
    if (!m.ok() || !std::holds_alternative<T>(*m)) {
      ADD_FAILURE() << "unexpected line from the worker: " << *line << " (" << m.status().message()
                    << ")";
      return T{};
    }
    return std::get<T>(*m);
  }

  void Send(const ControlMessage& m) { SendRaw(control::EncodeControlMessage(m) + "\n"); }
  void SendRaw(const std::string& data) {
    // MSG_NOSIGNAL: a worker that is gone must fail the test, not kill it with SIGPIPE.
    ASSERT_EQ(send(fd_, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
  }

 private:
  int fd_;
  std::string buffer_;
};

// The agent's end of DDPRUN_CONTROL_SOCKET.
class ControlServer {
 public:
  explicit ControlServer(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path_;
    EXPECT_EQ(listen(fd_, 16), 0);
  }
  ~ControlServer() { close(fd_); }
  const std::string& path() const { return path_; }

  std::unique_ptr<Channel> Accept(std::chrono::milliseconds timeout = 30s) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return nullptr;
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    return fd < 0 ? nullptr : std::make_unique<Channel>(fd);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

RoundMessage Round(int64_t round, int rank, int world_size, int port, int64_t deadline_ms,
                   int local_rank = -1) {
  RoundMessage m;
  m.round = round;
  m.rank = rank;
  m.world_size = world_size;
  m.local_rank = local_rank < 0 ? rank : local_rank;
  m.local_world_size = world_size;
  m.group_rank = 0;
  m.group_world_size = 1;
  m.master_addr = "127.0.0.1";
  m.master_port = port;
  m.restart_count = static_cast<int>(round - 1);
  m.store_prefix = control::RoundStorePrefix(round);
  m.deadline_ms = deadline_ms;
  return m;
}

AbortMessage Abort(int64_t round) {
  AbortMessage m;
  m.round = round;
  m.reason = "local rank 1 (pid 1) was killed by SIGKILL";
  return m;
}

class InProcessModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // What the agent does: the compiled-in module, written into a private folder.
    testing::WriteFile(module_dir_.File(python::kInProcessModuleFileName),
                       python::kInProcessModuleSource);
    ASSERT_NE(port_.port(), 0);
  }

  std::unique_ptr<Subprocess> Worker(const std::map<std::string, std::string>& env,
                                     std::vector<std::string> args) {
    std::vector<std::string> argv = {
        python_, testing::SourcePath("tests/python/scripts/inprocess_worker.py"), "--steps",
        absl::StrCat(kSteps)};
    argv.insert(argv.end(), args.begin(), args.end());
    std::map<std::string, std::string> full = {
        {"PYTHONPATH", module_dir_.path()}, {"RANK", "\x01unset"},
        {"WORLD_SIZE", "\x01unset"},        {"MASTER_ADDR", "\x01unset"},
        {"MASTER_PORT", "\x01unset"},       {"DDPRUN_CONTROL_SOCKET", "\x01unset"}};
    for (const auto& [k, v] : env) full[k] = v;
    return std::make_unique<Subprocess>(argv, full);
  }

  // An in-process worker of local rank `local_rank`, connected: its hello has been read.
  std::unique_ptr<Subprocess> Connected(ControlServer& server, int local_rank,
                                        std::vector<std::string> args,
                                        std::unique_ptr<Channel>* channel) {
    auto w =
        Worker({{"DDPRUN_CONTROL_SOCKET", server.path()}, {"LOCAL_RANK", absl::StrCat(local_rank)}},
               std::move(args));
    *channel = server.Accept();
    if (*channel == nullptr) {
      ADD_FAILURE() << "local rank " << local_rank << " did not connect: " << w->err();
      return w;
    }
    const HelloMessage hello = (*channel)->Read<HelloMessage>();
    EXPECT_EQ(hello.version, 1);
    EXPECT_EQ(hello.local_rank, local_rank);
    EXPECT_EQ(hello.pid, w->pid());
    return w;
  }

  // The fault-free run with plain env:// (no control socket), DDP re-wrapped where a recovery
  // at kHoldAt re-wraps it: every rank's final parameters and momenta (hex lines).
  std::string Reference() {
    TempDir out;
    ReservedPort port;
    std::vector<std::unique_ptr<Subprocess>> workers;
    for (int r = 0; r < 3; ++r) {
      workers.push_back(
          Worker({{"RANK", absl::StrCat(r)},
                  {"LOCAL_RANK", absl::StrCat(r)},
                  {"WORLD_SIZE", "3"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", absl::StrCat(port.port())}},
                 {"--out", out.File("final"), "--rewrap-at", absl::StrCat(kHoldAt + 1)}));
    }
    EXPECT_TRUE(testing::ExpectAllExit(workers, 0, 40s));
    const std::string rank0 = ReadFile(out.File("final.rank0"));
    for (int r = 1; r < 3; ++r) {
      EXPECT_EQ(ReadFile(out.File(absl::StrCat("final.rank", r))), rank0) << "rank " << r;
    }
    return rank0;
  }

  // `hostile` >= 0: that local rank claims step 10^15 from round 2 on, with a pickle as its
  // state (hostile_peer.py); a survivor contradicts it, so the honest state must win.
  void KillAndReplace(int victim, const std::vector<int>& round2, const std::string& api,
                      int hostile = -1);

  // Two ranks in round 1; local rank 1 claims step 10^15 (nobody can contradict it: no one has
  // trained yet) and sends `attack` instead of its state. Rank 0 must stop with an error that
  // contains `expect`, within seconds, and run nothing of what it got.
  void HostileFirstRound(const std::string& attack, const std::string& expect);

  // Two plain env:// workers with time_compute, rank 1 slow: each rank's compute_ms reports.
  void ExpectComputeTimesOfEachRank();

  TempDir module_dir_, dir_;
  ReservedPort port_;
  std::string python_ = testing::SystemPython();
};

TEST(InProcessModuleSourceTest, TheCompiledInModuleIsTheSourceFileByteForByte) {
  EXPECT_EQ(std::string(python::kInProcessModuleSource),
            ReadFile(testing::SourcePath("python/ddprun_inprocess.py")));
}

TEST_F(InProcessModuleTest, WithoutAControlSocketTheScriptRunsAsUnderTorchrun) {
  TempDir out;
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int r = 0; r < 3; ++r) {
    workers.push_back(Worker({{"RANK", absl::StrCat(r)},
                              {"LOCAL_RANK", absl::StrCat(r)},
                              {"WORLD_SIZE", "3"},
                              {"MASTER_ADDR", "127.0.0.1"},
                              {"MASTER_PORT", absl::StrCat(port_.port())}},
                             {"--out", out.File("final")}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(workers, 0, 40s));
  const std::string rank0 = ReadFile(out.File("final.rank0"));
  EXPECT_THAT(rank0, Not(::testing::IsEmpty()));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ReadFile(out.File(absl::StrCat("final.rank", r))), rank0) << "rank " << r;
    EXPECT_THAT(workers[r]->out(), HasSubstr(absl::StrCat("rank ", r, " step ", kSteps - 1)));
    // Nothing of the module's own: no round, no ready, no log line.
    EXPECT_THAT(workers[r]->err(), Not(HasSubstr("ddprun_inprocess"))) << workers[r]->err();
  }
}

// The classic failure: local rank `victim` is SIGKILLed mid-training (its peers see its
// connections close); the agent aborts round 1, sends round 2 with the ranks `round2` (by local
// rank) and starts a replacement, which receives the state.
void InProcessModuleTest::KillAndReplace(int victim, const std::vector<int>& round2,
                                         const std::string& api, int hostile) {
  const std::string reference = Reference();
  ControlServer server(dir_.File("control.sock"));
  std::vector<std::unique_ptr<Subprocess>> w(3);
  std::vector<std::unique_ptr<Channel>> ch(3);
  const std::vector<std::string> common = {"--out", dir_.File("final"), "--api", api};
  const std::string marker = dir_.File("marker");
  for (int lr = 0; lr < 3; ++lr) {
    std::vector<std::string> args = common;
    if (lr == victim) args.insert(args.end(), {"--hold-at", absl::StrCat(kHoldAt)});
    if (lr == hostile) {
      args.insert(args.end(), {"--hostile", "pickle", "--marker", marker, "--lie-from-round", "2"});
    }
    w[lr] = Connected(server, lr, args, &ch[lr]);
    ASSERT_NE(ch[lr], nullptr);
  }
  for (int lr = 0; lr < 3; ++lr) ch[lr]->Send(Round(1, lr, 3, port_.port(), 30000));
  for (int lr = 0; lr < 3; ++lr) {
    const ReadyMessage ready = ch[lr]->Read<ReadyMessage>();
    EXPECT_EQ(ready.round, 1);
    EXPECT_EQ(ready.step, -1);  // nothing trained yet
  }
  ASSERT_TRUE(w[victim]->WaitForOutputContains(absl::StrCat("holding at step ", kHoldAt), 30s))
      << w[victim]->err();
  w[victim]->Signal(SIGKILL);
  ASSERT_TRUE(w[victim]->Wait(10s).has_value());

  int source = 3;  // the lowest round-2 rank among the survivors, who hold step kHoldAt
  for (int lr = 0; lr < 3; ++lr) {
    if (lr == victim) continue;
    ch[lr]->Send(Abort(1));
    ch[lr]->Send(Round(2, round2[lr], 3, port_.port(), 30000, lr));
    source = std::min(source, round2[lr]);
  }
  w[victim] = Connected(server, victim, common, &ch[victim]);
  ASSERT_NE(ch[victim], nullptr);
  ch[victim]->Send(Round(2, round2[victim], 3, port_.port(), 30000, victim));
  for (int lr = 0; lr < 3; ++lr) {
    const ReadyMessage ready = ch[lr]->Read<ReadyMessage>();
    EXPECT_EQ(ready.round, 2) << "local rank " << lr;
    // Survivors hold step kHoldAt (their step kHoldAt + 1 failed in backward, before the
    // optimizer), and the replacement received it.
    EXPECT_EQ(ready.step, kHoldAt) << "local rank " << lr;
  }
  ASSERT_TRUE(testing::ExpectAllExit(w, 0, 40s));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ReadFile(dir_.File(absl::StrCat("final.rank", r))), reference) << "rank " << r;
  }
  for (int lr = 0; lr < 3; ++lr) {
    const std::string err = w[lr]->err();
    if (lr != victim) {
      EXPECT_THAT(err, HasSubstr(absl::StrCat("round 1: abandoned at step ", kHoldAt)));
    }
    EXPECT_THAT(err, HasSubstr(absl::StrCat("round 2: rank ", round2[lr], " of 3 ready at step ",
                                            kHoldAt, " (state from rank ", source, ")")));
    // Every step done once by each survivor; the replacement did only those after the one it
    // received.
    for (int s = 0; s < kSteps; ++s) {
      const int expected = (lr == victim && s <= kHoldAt) ? 0 : 1;
      EXPECT_EQ(testing::CountMatches(w[lr]->out(), absl::StrCat("rank [0-9] step ", s, " done\n")),
                expected)
          << "local rank " << lr << " step " << s;
    }
  }
  if (hostile >= 0) {
    EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the hostile rank's pickle ran";
    for (int lr = 0; lr < 3; ++lr) {
      EXPECT_THAT(w[lr]->err(), HasSubstr(absl::StrCat("the state of rank ", round2[hostile],
                                                       " is not taken: it claims step ", kHugeStep,
                                                       ", more than 1 ahead")))
          << "local rank " << lr;
    }
  }
  if (round2[victim] == 0 && victim != 0) {
    // The survivor that served round 1's store (local rank 0) still does: the new rank 0
    // connects to it.
    EXPECT_THAT(w[victim]->err(),
                HasSubstr(absl::StrCat("not serving the store at 127.0.0.1:", port_.port())));
  }
}

TEST_F(InProcessModuleTest, AKilledWorkerIsReplacedAndNoStepIsLostOrRepeated) {
  KillAndReplace(/*victim=*/1, /*round2=*/{0, 1, 2}, "run");
}

// Rank 0 served the store: it dies with it, and the replacement of rank 0 serves a new one.
TEST_F(InProcessModuleTest, WhenTheStoresServerIsKilledItsReplacementServesANewOne) {
  KillAndReplace(/*victim=*/0, /*round2=*/{0, 1, 2}, "loop");
}

// The replacement becomes rank 0: the port is taken by the survivor still serving round 1's
// store, so it connects to that one; the state comes from rank 1, the lowest survivor.
TEST_F(InProcessModuleTest, WhenRanksMoveTheNewRank0UsesTheSurvivorsStore) {
  KillAndReplace(/*victim=*/1, /*round2=*/{1, 0, 2}, "loop");
}

// D8: a survivor claims step 10^15 and holds a pickle that would run code where it is loaded.
// Rank 0, a survivor at step 4, contradicts it: the claim is refused on every rank (logged), the
// state comes from rank 0, the liar too takes it, and nobody ever sees the pickle.
TEST_F(InProcessModuleTest, AStepThatCannotBeTrueIsRefusedAndTheHonestStateWins) {
  KillAndReplace(/*victim=*/2, /*round2=*/{0, 1, 2}, "loop", /*hostile=*/1);
}

void InProcessModuleTest::HostileFirstRound(const std::string& attack, const std::string& expect) {
  ControlServer server(dir_.File("control.sock"));
  std::vector<std::unique_ptr<Subprocess>> w(2);
  std::vector<std::unique_ptr<Channel>> ch(2);
  const std::string marker = dir_.File("marker");
  w[0] = Connected(server, 0, {"--out", dir_.File("final")}, &ch[0]);
  ASSERT_NE(ch[0], nullptr);
  w[1] = Connected(server, 1,
                   {"--out", dir_.File("final"), "--hostile", attack, "--marker", marker}, &ch[1]);
  ASSERT_NE(ch[1], nullptr);
  for (int r = 0; r < 2; ++r) ch[r]->Send(Round(1, r, 2, port_.port(), 5000));
  const std::optional<testing::ExitStatus> st = w[0]->Wait(30s);
  ASSERT_TRUE(st.has_value()) << "still running:\n" << w[0]->err();
  EXPECT_EQ(st->exit_code, 1) << w[0]->err();
  EXPECT_THAT(w[0]->err(), HasSubstr("StateError: " + expect));
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the hostile rank's pickle ran in rank 0";
  EXPECT_THAT(w[1]->out(), HasSubstr("hostile rank 1: sending the " + attack + " attack"));
}

// D8: a peer's pickle is never loaded: the state is JSON metadata and raw tensor bytes, and a
// payload that is not is refused with the source named.
TEST_F(InProcessModuleTest, AHostileSourcesPickleIsNeverRunAndItsPeerStopsWithAClearError) {
  HostileFirstRound("pickle", "rank 1 sent invalid state metadata: ");
}

TEST_F(InProcessModuleTest, AHostileSourcesPickleIsNeverRunTorch211) {
  USE_TORCH211();
  HostileFirstRound("pickle", "rank 1 sent invalid state metadata: ");
}

// D8: a source that announces 10^15 bytes: refused before anything is allocated.
TEST_F(InProcessModuleTest, AHugeStateAnnouncedByAPeerIsRefusedBeforeAnyAllocation) {
  HostileFirstRound("size", absl::StrCat("rank 1 announces a state of ", 1000000000000100,
                                         " bytes, more than this process takes"));
}

// The format's own checks (tests/python/scripts/state_format_check.py), with both torches: a
// real model and optimizer arrive bit for bit; every malformed header, metadata and reference
// is refused; values the format cannot carry are named; the source's choice.
TEST_F(InProcessModuleTest, TheStateFormatRefusesWhatAPeerMustNotSend) {
  std::vector<std::string> pythons = {python_};
  const testing::Torch2& t2 = testing::FindTorch2();
  ASSERT_TRUE(t2.error.empty() || !t2.opted_out.empty()) << t2.error;
  if (t2.opted_out.empty()) pythons.push_back(t2.python);
  for (const std::string& python : pythons) {
    Subprocess p({python, testing::SourcePath("tests/python/scripts/state_format_check.py")},
                 {{"PYTHONPATH", module_dir_.path()}});
    const std::optional<testing::ExitStatus> st = p.Wait(60s);
    ASSERT_TRUE(st.has_value()) << python;
    EXPECT_EQ(st->exit_code, 0) << python << ":\n" << p.out() << p.err();
    EXPECT_THAT(p.out(), HasSubstr("ok: ")) << python;
  }
}

// ddprun's local lease (DDPRUN_LEASE_FD): past it step_done counts nothing and gives the held
// state up, in-process (LeaseExpired, swallowed by `with rnd:`) and cold (exit 75); may_commit()
// says so; no variable, no change (tests/python/scripts/lease_check.py).
TEST_F(InProcessModuleTest, PastTheLocalLeaseNoStepIsCountedAndNothingCommitted) {
  Subprocess p({python_, testing::SourcePath("tests/python/scripts/lease_check.py")},
               {{"PYTHONPATH", module_dir_.path()}, {"DDPRUN_CONTROL_SOCKET", "\x01unset"}});
  const std::optional<testing::ExitStatus> st = p.Wait(60s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << p.out() << p.err();
  EXPECT_THAT(p.out(), HasSubstr("ok: 11 checks"));
}

// A peer that is gone without a FIN (a lost node; here SIGSTOPped): the survivors are blocked
// in a gloo collective that would wait for its 30 s timeout. The abort must free them at once.
TEST_F(InProcessModuleTest, ACollectiveBlockedOnAStoppedPeerEndsWhenTheAbortArrives) {
  const std::string reference = Reference();
  ControlServer server(dir_.File("control.sock"));
  std::vector<std::unique_ptr<Subprocess>> w(3);
  std::vector<std::unique_ptr<Channel>> ch(3);
  const std::vector<std::string> common = {"--out", dir_.File("final")};
  for (int r = 0; r < 3; ++r) {
    std::vector<std::string> args = common;
    if (r == 1) args.insert(args.end(), {"--hold-at", absl::StrCat(kHoldAt)});
    w[r] = Connected(server, r, args, &ch[r]);
    ASSERT_NE(ch[r], nullptr);
  }
  for (int r = 0; r < 3; ++r) ch[r]->Send(Round(1, r, 3, port_.port(), 30000));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ch[r]->Read<ReadyMessage>().round, 1);
  ASSERT_TRUE(w[1]->WaitForOutputContains(absl::StrCat("holding at step ", kHoldAt), 30s));
  w[1]->Signal(SIGSTOP);
  for (int r : {0, 2}) {
    ASSERT_TRUE(
        w[r]->WaitForOutputContains(absl::StrCat("rank ", r, " step ", kHoldAt, " done"), 30s));
    EXPECT_THAT(w[r]->err(), Not(HasSubstr("abandoned")));
  }
  const auto aborted = Clock::now();
  for (int r : {0, 2}) ch[r]->Send(Abort(1));
  for (int r : {0, 2}) {
    EXPECT_TRUE(w[r]->WaitForOutputContains("round 1: abandoned at step 4", 10s))
        << "rank " << r << " still blocked after the abort:\n"
        << w[r]->err();
  }
  EXPECT_LT(Clock::now() - aborted, 10s);  // the collective's timeout is 30 s

  w[1]->Signal(SIGKILL);
  ASSERT_TRUE(w[1]->Wait(10s).has_value());
  for (int r : {0, 2}) ch[r]->Send(Round(2, r, 3, port_.port(), 30000));
  w[1] = Connected(server, 1, common, &ch[1]);
  ASSERT_NE(ch[1], nullptr);
  ch[1]->Send(Round(2, 1, 3, port_.port(), 30000));
  for (int r = 0; r < 3; ++r) {
    const ReadyMessage ready = ch[r]->Read<ReadyMessage>();
    EXPECT_EQ(ready.round, 2);
    EXPECT_EQ(ready.step, kHoldAt) << "rank " << r;
  }
  ASSERT_TRUE(testing::ExpectAllExit(w, 0, 40s));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ReadFile(dir_.File(absl::StrCat("final.rank", r))), reference) << "rank " << r;
  }
}

// §6b.6: a failed round with no next round within deadline_ms: exit non-zero with the error.
TEST_F(InProcessModuleTest, WithoutANextRoundWithinTheDeadlineTheWorkerExitsWithTheError) {
  ControlServer server(dir_.File("control.sock"));
  std::vector<std::unique_ptr<Subprocess>> w(2);
  std::vector<std::unique_ptr<Channel>> ch(2);
  w[0] = Connected(server, 0, {"--out", dir_.File("final")}, &ch[0]);
  ASSERT_NE(ch[0], nullptr);
  w[1] = Connected(server, 1, {"--out", dir_.File("final"), "--hold-at", "2"}, &ch[1]);
  ASSERT_NE(ch[1], nullptr);
  for (int r = 0; r < 2; ++r) ch[r]->Send(Round(1, r, 2, port_.port(), 3000));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ch[r]->Read<ReadyMessage>().round, 1);
  ASSERT_TRUE(w[1]->WaitForOutputContains("holding at step 2", 30s));
  w[1]->Signal(SIGKILL);
  const auto killed = Clock::now();
  ch[0]->Send(Abort(1));
  const std::optional<testing::ExitStatus> st = w[0]->Wait(30s);
  ASSERT_TRUE(st.has_value()) << "the survivor waits forever";
  EXPECT_EQ(st->exit_code, 1);
  EXPECT_LT(Clock::now() - killed, 15s);
  EXPECT_THAT(w[0]->err(), HasSubstr("RecoveryError: round 1 failed and no next round came: "
                                     "no new round from the agent within 3 s"));
  // The cause, chained: the collective's error when gloo saw the peer's socket close first, or
  // the agent's abort when it arrived first (sent right after the kill: either order happens).
  EXPECT_THAT(w[0]->err(), ::testing::AnyOf(HasSubstr("Connection closed by peer"),
                                            HasSubstr("RoundOver: round 1 is over")));
}

// Garbage from the agent, or none: a clear error and a non-zero exit, never a hang.
TEST_F(InProcessModuleTest, GarbageOrSilenceFromTheAgentIsAClearErrorNotAHang) {
  RoundMessage bad_rank = Round(1, 0, 1, port_.port(), 30000);
  std::string bad_rank_line = control::EncodeControlMessage(bad_rank);
  bad_rank_line.replace(bad_rank_line.find("\"rank\":0"), 8, "\"rank\":3");
  struct Case {
    std::string name, send, expect;
    bool close = false;
  };
  const std::vector<Case> cases = {
      {"not_json", "this is not json\n", "a bad message from the agent: not JSON"},
      {"long_line", std::string(5000, 'x'), "a bad message from the agent: a line over 4096"},
      {"bad_field", bad_rank_line + "\n", "\"rank\"=3 is outside [0, 0]"},
      {"unknown_type", "{\"type\":\"launch\"}\n", "unknown message type \"launch\""},
      {"bad_advice", "{\"type\":\"advice\",\"checkpoint_interval_s\":-1}\n",
       "advice: no valid \"checkpoint_interval_s\""},
      {"silent", "", "no new round from the agent within 3 s"},
      {"closed", "", "the agent closed the control channel", true},
  };
  // All started at once (an interpreter importing torch takes a second or two), then met.
  std::vector<std::unique_ptr<ControlServer>> servers;
  std::vector<std::unique_ptr<Subprocess>> w;
  for (const Case& c : cases) {
    servers.push_back(std::make_unique<ControlServer>(dir_.File(c.name + ".sock")));
    w.push_back(Worker(
        {{"DDPRUN_CONTROL_SOCKET", servers.back()->path()}, {"LOCAL_RANK", "0"}},
        {"--out", dir_.File("final"), "--connect-timeout", c.name == "silent" ? "3" : "30"}));
  }
  std::vector<std::unique_ptr<Channel>> ch;
  for (size_t i = 0; i < cases.size(); ++i) {
    ch.push_back(servers[i]->Accept());
    ASSERT_NE(ch.back(), nullptr) << cases[i].name << ": " << w[i]->err();
    EXPECT_EQ(ch.back()->Read<HelloMessage>().pid, w[i]->pid());
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!cases[i].send.empty()) ch[i]->SendRaw(cases[i].send);
    if (cases[i].close) ch[i].reset();
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::optional<testing::ExitStatus> st = w[i]->Wait(20s);
    ASSERT_TRUE(st.has_value()) << cases[i].name << ": still running";
    EXPECT_EQ(st->exit_code, 1) << cases[i].name;
    EXPECT_THAT(w[i]->err(), HasSubstr("ControlError")) << cases[i].name;
    EXPECT_THAT(w[i]->err(), HasSubstr(cases[i].expect)) << cases[i].name;
  }
}

// The checkpoint advice (issue 41): the module's hello says it takes advice messages, and the
// script reads the newest with checkpoint_interval_advice(); before any message, the value the
// worker was started with (DDPRUN_CHECKPOINT_INTERVAL_ADVICE). A save the script reports goes
// with its next step report, as ddp-train's "checkpoint_ms".
TEST_F(InProcessModuleTest, TheScriptReadsTheAgentsCheckpointAdviceAndReportsItsSaves) {
  ControlServer server(dir_.File("control.sock"));
  const std::string progress = dir_.File("progress");
  { std::ofstream touch(progress); }
  auto w = Worker({{"DDPRUN_CONTROL_SOCKET", server.path()},
                   {"LOCAL_RANK", "0"},
                   {"DDPRUN_PROGRESS_FILE", progress},
                   {"DDPRUN_CHECKPOINT_INTERVAL_ADVICE", "30"}},
                  {"--out", dir_.File("final"), "--steps", "6", "--print-advice", "--step-seconds",
                   "0.5", "--report-checkpoint"});
  std::unique_ptr<Channel> ch = server.Accept();
  ASSERT_NE(ch, nullptr) << w->err();
  const HelloMessage hello = ch->Read<HelloMessage>();
  EXPECT_TRUE(hello.advice) << "the hello says advice messages are welcome";
  ch->Send(Round(1, 0, 1, port_.port(), 30000));
  ASSERT_TRUE(w->WaitForOutputContains("advice 30.0", 60s)) << w->out() << w->err();
  ch->Send(control::AdviceMessage{12.5});
  EXPECT_TRUE(w->WaitForOutputContains("advice 12.5", 30s)) << w->out() << w->err();
  const std::optional<testing::ExitStatus> st = w->Wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 0) << w->err();
  const std::string reports = ReadFile(progress);
  EXPECT_THAT(reports, HasSubstr(",\"step\":3,\"checkpoint_ms\":250.000}")) << reports;
  EXPECT_THAT(reports, HasSubstr(",\"step\":4}")) << "reported once";
}

// Slow nodes (issue 41, point 2): with time_compute's hook on the DDP model every step report
// says how long the rank computed before it waited in the all-reduce. Rank 1 sleeps 0.2 s
// before each forward: it reports at least 200 ms a step, while rank 0, which spends those
// 0.2 s waiting inside the all-reduce, reports its own few milliseconds.
void InProcessModuleTest::ExpectComputeTimesOfEachRank() {
  const TempDir& dir = dir_;
  ReservedPort port;
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int r = 0; r < 2; ++r) {
    const std::string progress = dir.File(absl::StrCat("progress", r));
    { std::ofstream touch(progress); }
    workers.push_back(Worker({{"RANK", absl::StrCat(r)},
                              {"LOCAL_RANK", absl::StrCat(r)},
                              {"WORLD_SIZE", "2"},
                              {"MASTER_ADDR", "127.0.0.1"},
                              {"MASTER_PORT", absl::StrCat(port.port())},
                              {"DDPRUN_PROGRESS_FILE", progress}},
                             {"--out", dir.File("final"), "--time-compute", "--slow-rank", "1",
                              "--slow-seconds", "0.2"}));
  }
  ASSERT_TRUE(testing::ExpectAllExit(workers, 0, 60s));
  std::vector<double> compute_ms[2];
  for (int r = 0; r < 2; ++r) {
    const std::string reports = ReadFile(dir.File(absl::StrCat("progress", r)));
    const std::regex figure("\\{\"pid\":[0-9]+,\"step\":[0-9]+,\"compute_ms\":([0-9.]+)\\}");
    for (std::sregex_iterator it(reports.begin(), reports.end(), figure), end; it != end; ++it) {
      compute_ms[r].push_back(std::stod((*it)[1].str()));
    }
    // Every step but a round's first (it has no start mark yet) says how long it computed.
    EXPECT_EQ(compute_ms[r].size(), static_cast<size_t>(kSteps - 1)) << "rank " << r << reports;
  }
  EXPECT_GE(*std::min_element(compute_ms[1].begin(), compute_ms[1].end()), 200)
      << "the slow rank's sleep is computation";
  EXPECT_LT(Median(compute_ms[0]), 100) << "the fast rank's wait in the all-reduce is not";
  std::cout << "compute ms a step, median: rank 0 " << Median(compute_ms[0]) << ", rank 1 "
            << Median(compute_ms[1]) << "\n";
}

TEST_F(InProcessModuleTest, TimeComputeReportsWhatEachRankComputedBeforeItWaited) {
  ExpectComputeTimesOfEachRank();
}

TEST_F(InProcessModuleTest, TimeComputeReportsWhatEachRankComputedBeforeItWaitedTorch211) {
  USE_TORCH211();
  ExpectComputeTimesOfEachRank();
}

// Garbage in the middle of a round whose collective is blocked on a stopped peer: the channel
// is closed, the round cut off, and the worker exits with the reason instead of waiting for the
// collective's timeout.
TEST_F(InProcessModuleTest, GarbageMidRoundCutsTheRoundOffAndTheWorkerExits) {
  ControlServer server(dir_.File("control.sock"));
  std::vector<std::unique_ptr<Subprocess>> w(2);
  std::vector<std::unique_ptr<Channel>> ch(2);
  w[0] = Connected(server, 0, {"--out", dir_.File("final")}, &ch[0]);
  ASSERT_NE(ch[0], nullptr);
  w[1] = Connected(server, 1, {"--out", dir_.File("final"), "--hold-at", "2"}, &ch[1]);
  ASSERT_NE(ch[1], nullptr);
  for (int r = 0; r < 2; ++r) ch[r]->Send(Round(1, r, 2, port_.port(), 30000));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ch[r]->Read<ReadyMessage>().round, 1);
  ASSERT_TRUE(w[1]->WaitForOutputContains("holding at step 2", 30s));
  ASSERT_TRUE(w[0]->WaitForOutputContains("rank 0 step 2 done", 30s));
  const auto sent = Clock::now();
  ch[0]->SendRaw("{\"type\":\"round\"\n");
  const std::optional<testing::ExitStatus> st = w[0]->Wait(20s);
  ASSERT_TRUE(st.has_value()) << "blocked until the collective's timeout";
  EXPECT_EQ(st->exit_code, 1);
  EXPECT_LT(Clock::now() - sent, 15s);
  EXPECT_THAT(w[0]->err(), HasSubstr("a bad message from the agent: not JSON"));
}

}  // namespace
}  // namespace ddprun
