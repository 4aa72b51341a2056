// ddprun inside a real Slurm: a private cluster (slurmctld + `slurmd -N n1` + `slurmd -N n2` on
// this host, tests/slurm/slurm_cluster.sh) per test, real srun / sbatch / scancel / scontrol.
// Without root, Slurm or munge every test is SKIPPED with the reason, never passed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using testing::ExitStatus;
using ::testing::HasSubstr;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::SourcePath;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitUntil;
using testing::WriteFile;
using namespace std::chrono_literals;

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Runs a command to completion; its exit code and stdout+stderr.
struct Result {
  int exit_code = -1;
  std::string out, err;
};

class SlurmClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Subprocess start({"bash", Script(), "start", cluster_dir_.path()});
    std::optional<ExitStatus> st = start.Wait(90s);
    ASSERT_TRUE(st.has_value()) << "slurm_cluster.sh start hung\n" << start.err();
    if (st->exit_code == 77) GTEST_SKIP() << absl::StripTrailingAsciiWhitespace(start.err());
    ASSERT_EQ(st->exit_code, 0) << "the test cluster did not start:\n" << start.err();
    started_ = true;
    env_ = {{"SLURM_CONF", cluster_dir_.File("slurm.conf")}};
  }

  void TearDown() override {
    if (!started_) return;
    Subprocess stop({"bash", Script(), "stop", cluster_dir_.path()});
    std::optional<ExitStatus> st = stop.Wait(90s);
    EXPECT_TRUE(st.has_value() && st->exit_code == 0) << stop.err();
  }

  static std::string Script() { return SourcePath("tests/slurm/slurm_cluster.sh"); }

  std::unique_ptr<Subprocess> Start(std::vector<std::string> argv) {
    return std::make_unique<Subprocess>(std::move(argv), env_, dir_.path());
  }

  Result Run(std::vector<std::string> argv, std::chrono::milliseconds timeout = 60s) {
    auto p = Start(std::move(argv));
    std::optional<ExitStatus> st = p->Wait(timeout);
    Result r;
    r.out = p->out();
    r.err = p->err();
    EXPECT_TRUE(st.has_value()) << "timed out: " << r.err;
    if (st.has_value()) r.exit_code = st->exit_code >= 0 ? st->exit_code : 128 + st->signal;
    return r;
  }

  // A worker script that records its environment in DIR/env-$RANK, then runs `then`.
  std::string EnvWorker(const std::string& then) {
    const std::string path = dir_.File("env_worker.sh");
    WriteFile(path,
              "#!/bin/sh\n"
              "echo \"rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE "
              "group=$GROUP_RANK gws=$GROUP_WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT "
              "run=$TORCHELASTIC_RUN_ID pid=$$ task=$SLURM_TASK_PID node=$SLURMD_NODENAME\" > " +
                  dir_.File("env-$RANK") + ".tmp && mv " + dir_.File("env-$RANK") + ".tmp " +
                  dir_.File("env-$RANK") + "\n" + then + "\n",
              0755);
    return path;
  }

  std::map<std::string, std::string> EnvOf(int rank) {
    std::map<std::string, std::string> kv;
    const std::string text(
        absl::StripTrailingAsciiWhitespace(ReadFile(dir_.File("env-" + std::to_string(rank)))));
    for (absl::string_view item : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
      std::vector<std::string> p = absl::StrSplit(item, absl::MaxSplits('=', 1));
      if (p.size() == 2) kv[p[0]] = p[1];
    }
    return kv;
  }

  bool AllExist(const std::string& prefix, int n) {
    for (int i = 0; i < n; ++i) {
      if (!Exists(dir_.File(prefix + std::to_string(i)))) return false;
    }
    return true;
  }

  // srun --no-kill, --nnodes=1:2 with a 3 s lease and a 0.2 s last call: the agent on node `victim`
  // is SIGKILLed; the agent on `survivor` re-forms a one-node round and finishes with exit 0; the
  // victim's workers are gone too. Seconds from the kill until the survivor's one-node round runs.
  double KillAgentAndFinishOnTheOther(const std::string& victim, const std::string& survivor) {
    const std::string worker =
        // Written whole before it exists (the test reads it as soon as it exists).
        EnvWorker("echo $PPID > " + dir_.File("agent-$SLURMD_NODENAME.tmp") + " && mv " +
                  dir_.File("agent-$SLURMD_NODENAME.tmp") + " " +
                  dir_.File("agent-$SLURMD_NODENAME") +
                  "\n"
                  "echo \"round=$DDPRUN_ROUND world=$WORLD_SIZE node=$SLURMD_NODENAME\" >> " +
                  dir_.File("rounds") +
                  "\n"
                  "[ \"$WORLD_SIZE\" = 1 ] && exit 0\n"
                  "sleep 600 & wait\n");
    const std::string exits = dir_.File("exits");
    auto srun = Start({"srun", "-N2", "--ntasks-per-node=1", "--no-kill", "bash", "-c",
                       BinPath("ddprun") +
                           " --nnodes=1:2 --nproc-per-node=1 --max-restarts=3"
                           " --rdzv-conf=last_call_timeout=0.2,keep_alive_interval=1,"
                           "keep_alive_max_attempt=3 --no-python " +
                           worker + "; echo \"$SLURMD_NODENAME rc=$?\" >> " + exits});
    EXPECT_TRUE(WaitUntil(
        [&] { return Exists(dir_.File("agent-n1")) && Exists(dir_.File("agent-n2")); }, 30s))
        << srun->err();
    int agent = 0;
    EXPECT_TRUE(absl::SimpleAtoi(
        absl::StripTrailingAsciiWhitespace(ReadFile(dir_.File("agent-" + victim))), &agent));
    if (agent <= 0) return -1;
    const auto killed = std::chrono::steady_clock::now();
    EXPECT_EQ(kill(agent, SIGKILL), 0);
    double running = -1;
    EXPECT_TRUE(WaitUntil(
        [&] {
          if (running < 0 &&
              ReadFile(dir_.File("rounds")).find("world=1 node=" + survivor) != std::string::npos) {
            running =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
          }
          return ReadFile(exits).find(survivor + " rc=") != std::string::npos;
        },
        60s))
        << srun->err() << ReadFile(dir_.File("rounds"));
    EXPECT_THAT(ReadFile(exits), HasSubstr(survivor + " rc=0")) << srun->err();
    EXPECT_THAT(ReadFile(dir_.File("rounds")), HasSubstr("world=1 node=" + survivor));
    std::optional<ExitStatus> st = srun->Wait(30s);
    EXPECT_TRUE(st.has_value()) << srun->err();
    EXPECT_THAT(ReadFile(exits), HasSubstr(victim + " rc=137"));
    return running;
  }

  TempDir cluster_dir_;
  TempDir dir_;
  bool started_ = false;
  std::map<std::string, std::string> env_;
};

// Two nodes, one srun task each, no rendezvous flag: the step's node list, node id and job id
// are enough for both agents to form one world of 4.
TEST_F(SlurmClusterTest, AgentModeFormsOneWorldOfFourWithoutRendezvousFlags) {
  const std::string worker = EnvWorker("exit 0");
  Result r = Run({"srun", "-N2", "--ntasks-per-node=1", BinPath("ddprun"), "--nproc-per-node=2",
                  "--no-python", worker});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("agent mode, 2 nodes, node rank 0, 2 workers per node"));
  EXPECT_THAT(r.err, HasSubstr("agent mode, 2 nodes, node rank 1, 2 workers per node"));
  std::set<std::string> runs, masters, nodes_of_rank0_1, nodes_of_rank2_3;
  for (int rank = 0; rank < 4; ++rank) {
    auto kv = EnvOf(rank);
    EXPECT_EQ(kv["rank"], std::to_string(rank));
    EXPECT_EQ(kv["world"], "4");
    EXPECT_EQ(kv["lws"], "2");
    EXPECT_EQ(kv["local"], std::to_string(rank % 2));
    EXPECT_EQ(kv["group"], std::to_string(rank / 2));
    EXPECT_EQ(kv["gws"], "2");
    runs.insert(kv["run"]);
    masters.insert(kv["master"]);
    (rank < 2 ? nodes_of_rank0_1 : nodes_of_rank2_3).insert(kv["node"]);
  }
  EXPECT_EQ(runs.size(), 1u);
  EXPECT_THAT(*runs.begin(), ::testing::MatchesRegex("[0-9]+\\.0"));  // JOB.STEP
  EXPECT_EQ(masters.size(), 1u);
  // SLURM_NODEID decides the node rank: n1 is node 0.
  EXPECT_EQ(nodes_of_rank0_1, (std::set<std::string>{"n1"}));
  EXPECT_EQ(nodes_of_rank2_3, (std::set<std::string>{"n2"}));
}

// `--ntasks-per-node=2`: each task is one worker; ddprun maps the task's Slurm ids and execs the
// program in place (its pid is the task's).
TEST_F(SlurmClusterTest, PerTaskModeMapsSlurmIdsAndExecsInPlace) {
  const std::string worker = EnvWorker("exit 0");
  Result r = Run({"srun", "-N2", "--ntasks-per-node=2", BinPath("ddprun"), "--no-python", worker});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("per-task mode, rank 3 of 4, local rank 1 of 2"));
  for (int rank = 0; rank < 4; ++rank) {
    auto kv = EnvOf(rank);
    EXPECT_EQ(kv["world"], "4");
    EXPECT_EQ(kv["local"], std::to_string(rank % 2));
    EXPECT_EQ(kv["lws"], "2");
    EXPECT_EQ(kv["group"], std::to_string(rank / 2));
    EXPECT_EQ(kv["node"], rank < 2 ? "n1" : "n2");
    EXPECT_THAT(kv["master"], ::testing::StartsWith("n1:"));
    EXPECT_EQ(kv["pid"], kv["task"]) << "ddprun should have exec'd the worker in place";
  }
}

// The same layout with ddp-train: the four tasks meet at MASTER_ADDR (the step's first host)
// and the derived MASTER_PORT and train as one gloo world.
TEST_F(SlurmClusterTest, PerTaskModeTrainsOneGlooWorld) {
  if (!Exists(std::string(kData) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << kData << " missing (apt-get install dataset-fashion-mnist)";
  }
  Result r =
      Run({"srun", "-N2", "--ntasks-per-node=2", BinPath("ddprun"), "--no-python",
           BinPath("ddp-train"), "mnist", "--data", kData, "--train-subset", "512", "--test-subset",
           "128", "--epochs", "1", "--batch-size", "16", "--no-progress-bar"},
          120s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("world_size 4 rank 0 backend gloo")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("test_acc")) << r.out;
}

// scancel sends SIGTERM to the step; ddprun stops its workers (one ignores SIGTERM and needs
// ddprun's SIGKILL after --stop-timeout, 10 s by default) well within Slurm's KillWait (30 s), and
// no agent, worker or worker child is left.
TEST_F(SlurmClusterTest, ScancelLeavesNoProcessBehind) {
  const std::string worker =
      EnvWorker("echo $SLURM_JOB_ID > " + dir_.File("job") +
                "\n"
                "[ \"$RANK\" = 3 ] && trap '' TERM\n"
                "sleep 600 &\n"
                "echo \"$$ $PPID $!\" > " +
                dir_.File("pids-$RANK.tmp") + " && mv " + dir_.File("pids-$RANK.tmp") + " " +
                dir_.File("pids-$RANK") + "\nwait\n");
  auto srun = Start({"srun", "-N2", "--ntasks-per-node=1", BinPath("ddprun"), "--nproc-per-node=2",
                     "--no-python", worker});
  ASSERT_TRUE(WaitUntil([&] { return AllExist("pids-", 4); }, 30s)) << srun->err();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 4; ++rank) {
    for (absl::string_view p : absl::StrSplit(ReadFile(dir_.File("pids-" + std::to_string(rank))),
                                              absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
      int pid = 0;
      ASSERT_TRUE(absl::SimpleAtoi(p, &pid));
      pids.push_back(pid);  // worker, its agent, its sleep child
    }
  }
  for (pid_t pid : pids) ASSERT_TRUE(ProcessAlive(pid)) << pid;
  const std::string job(absl::StripTrailingAsciiWhitespace(ReadFile(dir_.File("job"))));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Run({"scancel", job}).exit_code, 0);
  const bool all_gone = WaitUntil(
      [&] {
        for (pid_t pid : pids) {
          if (ProcessAlive(pid)) return false;
        }
        return true;
      },
      25s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (pid_t pid : pids) EXPECT_FALSE(ProcessAlive(pid)) << "pid " << pid << " survived scancel";
  ASSERT_TRUE(all_gone);
  EXPECT_LT(took, 25.0) << "should be well within KillWait=30";
  std::optional<ExitStatus> st = srun->Wait(30s);
  ASSERT_TRUE(st.has_value());
  // The agents saw SIGTERM and said so (they exit 143 after stopping the workers).
  EXPECT_THAT(srun->err(), HasSubstr("SIGTERM")) << srun->err();
}

// #SBATCH --requeue job: a SIGUSR1 warning (what --signal=USR1@N sends; delivered here with
// scancel --signal=USR1) reaches ddp-train through ddprun; it saves a checkpoint and exits 138;
// the batch script requeues the job; the second run resumes from that checkpoint and finishes.
// Two nodes x 2 workers: one gloo world of 4 across the Slurm nodes.
TEST_F(SlurmClusterTest, Usr1PreemptionCheckpointsAndTheRequeuedRunResumes) {
  if (!Exists(std::string(kData) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << kData << " missing (apt-get install dataset-fashion-mnist)";
  }
  const std::string runs = dir_.File("runs");
  const std::string script = dir_.File("job.sh");
  WriteFile(script,
            "#!/bin/bash\n"
            "echo \"start restart=${SLURM_RESTART_COUNT:-0}\" >> " +
                runs + "\n" + "srun " + BinPath("ddprun") + " --nproc-per-node=2 --no-python " +
                BinPath("ddp-train") + " mnist --data " + kData +
                " --train-subset 8192 --test-subset 256 --epochs 2 --max-steps 80 --batch-size 16"
                " --log-interval 5 --no-progress-bar --checkpoint-dir " +
                dir_.File("ckpt") +
                "\n"
                "rc=$?\n"
                "echo \"end restart=${SLURM_RESTART_COUNT:-0} rc=$rc\" >> " +
                runs + "\n" +
                // As configs/sbatch-requeue.sh: stopped early -> back in the queue, once here.
                "if [ $rc -ne 0 ] && [ \"${SLURM_RESTART_COUNT:-0}\" -lt 1 ]; then\n"
                "  scontrol requeue \"$SLURM_JOB_ID\"\n"
                "fi\n"
                "exit $rc\n",
            0755);
  Result sb = Run({"sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--requeue", "-o",
                   dir_.File("job.out"), "--open-mode=append", script});
  ASSERT_EQ(sb.exit_code, 0) << sb.err;
  const std::string job(absl::StripTrailingAsciiWhitespace(sb.out));
  const std::string out = dir_.File("job.out");
  ASSERT_TRUE(
      WaitUntil([&] { return ReadFile(out).find("Train Epoch: 1") != std::string::npos; }, 60s))
      << ReadFile(out);
  ASSERT_EQ(Run({"scancel", "--signal=USR1", job}).exit_code, 0);
  ASSERT_TRUE(
      WaitUntil([&] { return ReadFile(runs).find("end restart=0") != std::string::npos; }, 60s))
      << ReadFile(out);
  EXPECT_THAT(ReadFile(runs), HasSubstr("end restart=0 rc=1"));
  std::string first = ReadFile(out);
  EXPECT_THAT(first, HasSubstr("stop requested (signal 10)"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first, m, std::regex("checkpoint: saved step (\\d+)"))) << first;
  const std::string saved_step = m[1];

  // Slurm holds a requeued job for 120 s (BeginTime), not least so that the new run's job
  // credential postdates the one revoked at the requeue (a start in the same second is refused:
  // "Job credential revoked"). Once the job is back in the queue, move its start to 2 s from
  // now, as an operator would.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Run({"squeue", "-h", "-j", job, "-o", "%T"}).out.find("PENDING") !=
               std::string::npos;
      },
      30s))
      << ReadFile(runs);
  ASSERT_EQ(Run({"scontrol", "update", "JobId=" + job, "StartTime=now+2"}).exit_code, 0);
  ASSERT_TRUE(
      WaitUntil([&] { return ReadFile(runs).find("start restart=1") != std::string::npos; }, 60s))
      << ReadFile(runs) << Run({"scontrol", "show", "job", job}).out << Run({"sinfo", "-N"}).out
      << ReadFile(out) << ReadFile(cluster_dir_.File("log/slurmctld.log"));
  ASSERT_TRUE(
      WaitUntil([&] { return ReadFile(runs).find("end restart=1") != std::string::npos; }, 120s))
      << ReadFile(out);
  EXPECT_THAT(ReadFile(runs), HasSubstr("end restart=1 rc=0"));
  const std::string all = ReadFile(out);
  const std::string second = all.substr(first.size());
  EXPECT_THAT(second, HasSubstr("resumed from checkpoint"));
  EXPECT_THAT(second, HasSubstr(", step " + saved_step)) << second;
  EXPECT_THAT(second, HasSubstr("world size 4")) << second;
}

// The agent on n2 (not the host) is lost: n1, which hosts the rendezvous, goes on alone.
TEST_F(SlurmClusterTest, NoKillElasticJobFinishesOnTheSurvivingNode) {
  KillAgentAndFinishOnTheOther("n2", "n1");
}

// Issue 24: the agent on n1, which hosts the rendezvous of agent mode, is lost. n2 is its
// successor: it serves the run on the same derived port at its own address, re-registers, and
// goes on alone in less than the lease (keep_alive_interval=1: 3 s).
TEST_F(SlurmClusterTest, NoKillElasticJobGoesOnWhenTheHostingAgentIsKilled) {
  const double running = KillAgentAndFinishOnTheOther("n1", "n2");
  std::cout << "Slurm agent mode, the hosting agent killed -> the survivor running again: "
            << running << " s (lease 3 s)" << std::endl;
  EXPECT_LT(running, 3.0);  // less than the lease: nobody waits for the gone host
}

// A node list ddprun cannot parse, and `--nproc-per-node=gpu` in a step without GPUs: one line,
// exit 2, no worker started.
TEST_F(SlurmClusterTest, BadInputInsideAStepIsAUsageError) {
  const std::string worker = EnvWorker("exit 0");
  Result r = Run({"srun", "-N1", BinPath("ddprun"), "--nproc-per-node=gpu", "--no-python", worker});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--nproc-per-node=gpu: the Slurm step has no GPU on this node"));
  r = Run({"srun", "-N2", BinPath("ddprun"), "--nnodes=3", "--no-python", worker});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--nnodes=3 contradicts the Slurm step's 2 nodes"));
  // slurmstepd sets the node list itself; a wrapper stands for a Slurm that writes a bad one.
  r = Run({"srun", "-N1", "bash", "-c",
           "SLURM_STEP_NODELIST='n[1-' exec " + BinPath("ddprun") + " --no-python " + worker});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("SLURM_STEP_NODELIST: hostlist 'n[1-': expected a number"));
  EXPECT_FALSE(Exists(dir_.File("env-0")));
}

}  // namespace
}  // namespace ddprun
