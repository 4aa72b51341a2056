// A worker that speaks the in-process control protocol (docs/design.md §6b) without any
// training, so the agent's side can be tested fast and exactly: it counts "steps" of
// --step-ms each, re-forms when its round is over, and logs one line per event:
//
//   rank=R pid=P round=N world=W step=S joined     (a round message, after which it is ready)
//   rank=R pid=P done step=S                       (it counted --steps steps; exits 0)
//
// Faults, only in the job's first round (TORCHELASTIC_RESTART_COUNT=0 and restart_count 0):
//   --fail-rank R --fail-step S --fail-mode exit|kill|segv|hang   rank R fails at step S
// Protocol misbehaviour: --silent-rank R (never connects), --late-rank R (never sends ready
// after a re-formation), --die-joining-rank R (exits 1 on joining a round of restart 1, before
// its ready: a failure during a re-formation), --leave-early-rank R (a start of rank R after the
// first, TORCHELASTIC_RESTART_COUNT > 0, exits 0 before it connects: no hello).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "control/control_client.h"

namespace {

int IntEnv(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? atoi(v) : fallback;
}

void Say(const std::string& line) {
  const std::string out = absl::StrCat(line, "\n");
  fwrite(out.data(), 1, out.size(), stdout);
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, step_ms = 50, fail_rank = -1, fail_step = -1, silent_rank = -1, late_rank = -1,
      die_joining_rank = -1, leave_early_rank = -1;
  std::string fail_mode = "exit";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--steps") steps = atoi(value.c_str());
    if (flag == "--step-ms") step_ms = atoi(value.c_str());
    if (flag == "--fail-rank") fail_rank = atoi(value.c_str());
    if (flag == "--fail-step") fail_step = atoi(value.c_str());
    if (flag == "--fail-mode") fail_mode = value;
    if (flag == "--silent-rank") silent_rank = atoi(value.c_str());
    if (flag == "--late-rank") late_rank = atoi(value.c_str());
    if (flag == "--die-joining-rank") die_joining_rank = atoi(value.c_str());
    if (flag == "--leave-early-rank") leave_early_rank = atoi(value.c_str());
  }
  int rank = IntEnv("RANK", 0);
  const bool first_start = IntEnv("TORCHELASTIC_RESTART_COUNT", 0) == 0;
  const char* socket = getenv("DDPRUN_CONTROL_SOCKET");
  const std::string who = absl::StrCat("pid=", getpid());
  if (!first_start && rank == leave_early_rank) {
    Say(absl::StrCat("rank=", rank, " ", who, " leaving before its hello"));
    return 0;
  }
  std::unique_ptr<ddprun::control::ControlClient> client;
  if (socket != nullptr && rank != silent_rank) {
    auto connected =
        ddprun::control::ControlClient::Connect(socket, IntEnv("LOCAL_RANK", 0), absl::Seconds(30));
    if (!connected.ok()) {
      fprintf(stderr, "control_worker: %s\n", std::string(connected.status().message()).c_str());
      return 1;
    }
    client = *std::move(connected);
  }
  int64_t round = client ? client->current_round().round : IntEnv("DDPRUN_ROUND", 0);
  int world = client ? client->current_round().world_size : IntEnv("WORLD_SIZE", 1);
  int restart_count = client ? client->current_round().restart_count : 0;
  if (client) rank = client->current_round().rank;
  int step = 0;
  bool reformed = false;
  auto joined = [&] {
    if (rank == die_joining_rank && restart_count == 1) {
      Say(absl::StrCat("rank=", rank, " ", who, " dying while joining round=", round));
      exit(1);
    }
    Say(absl::StrCat("rank=", rank, " ", who, " round=", round, " world=", world, " step=", step,
                     " joined"));
    if (client && !(reformed && rank == late_rank)) client->SendReady(round, step).IgnoreError();
  };
  joined();
  while (step < steps) {
    if (client && client->WaitRoundOver(round, absl::Milliseconds(step_ms))) {
      auto next = client->WaitForRound(round, absl::Seconds(60));
      if (!next.ok()) {
        fprintf(stderr, "control_worker: rank %d: %s\n", rank,
                std::string(next.status().message()).c_str());
        return 1;
      }
      round = next->round;
      rank = next->rank;
      world = next->world_size;
      restart_count = next->restart_count;
      reformed = true;
      joined();
      continue;
    }
    if (!client) usleep(step_ms * 1000);
    ++step;
    Say(absl::StrCat("rank=", rank, " step=", step));  // a sign of life for hang detection
    if (first_start && restart_count == 0 && rank == fail_rank && step == fail_step) {
      Say(absl::StrCat("rank=", rank, " ", who, " failing (", fail_mode, ") at step=", step));
      if (fail_mode == "kill") raise(SIGKILL);
      if (fail_mode == "segv") raise(SIGSEGV);
      if (fail_mode == "hang") {
        while (true) pause();
      }
      return 1;
    }
  }
  Say(absl::StrCat("rank=", rank, " ", who, " done step=", step));
  return 0;
}
