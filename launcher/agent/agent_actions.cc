#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "launcher/agent/agent.h"
#include "launcher/config/template_macros.h"
#include "launcher/workers/worker_env.h"

namespace ddprun::launcher {

void Agent::Execute(const std::vector<AgentAction>& actions) {
  for (const AgentAction& action : actions) Execute(action);
}

void Agent::Execute(const AgentAction& action) {
  switch (action.type) {
    case AgentAction::Type::kStartWorkers:
      StartWorkers(action.assignment);
      break;
    case AgentAction::Type::kAbortRound:
      AbortRound(action);
      break;
    case AgentAction::Type::kReformWorkers:
      ReformWorkers(action.assignment, action.local_ranks);
      break;
    case AgentAction::Type::kStopWorkers:
      StopWorkers(action);
      break;
    case AgentAction::Type::kKillWorkers:
      if (group_) group_->Kill();
      break;
    case AgentAction::Type::kReportFailed:
      ReportFailure(action);
      break;
    case AgentAction::Type::kReportSucceeded:
      rendezvous_->ReportGroupState(action.round, rendezvous::GroupState::kSucceeded, std::nullopt);
      break;
    case AgentAction::Type::kLeave:
      rendezvous_->Leave(action.message);
      break;
    case AgentAction::Type::kCheckHealth:
      CheckReadiness();
      break;
    case AgentAction::Type::kStepOut:
      if (joined_) rendezvous_->StepOut(action.message);
      break;
    case AgentAction::Type::kStepIn:
      StepIn();
      break;
    case AgentAction::Type::kExit:
      ExitAgent(action);
      break;
  }
}

void Agent::AbortRound(const AgentAction& action) {
  hangs_.OnGroupStopping();
  LogInfo(absl::StrCat("round ", action.round, " is over (", action.message,
                       "); in-process recovery: the surviving workers wait for the next"));
  reform_->Abort(action.round, action.message);
  StepEvent aborted{Step::kRoundAborted};
  aborted.round = action.round;
  RecordStep(aborted);
}

void Agent::StopWorkers(const AgentAction& action) {
  hangs_.OnGroupStopping();
  if (group_ && action.local_rank < 0 && group_->live() > 0 && !stopping_) {
    stopping_ = true;
    RecordStep(StepEvent{Step::kStopBegun});
  }
  if (!group_) return;
  if (action.stop_mode != StopMode::kTakeStacksFirst) {
    group_->Stop();
    return;
  }
  StackPlan plan;
  plan.reason = action.failure.hang.empty()
                    ? action.message
                    : absl::StrCat("rank ", action.failure.rank, " hung: ", action.failure.hang);
  if (action.hang_signal > 0) {
    plan.signal_rank = action.failure.local_rank;
    plan.signal = action.hang_signal;
  }
  plan.only_local_rank = action.local_rank;
  stacks_taken_ = true;
  LogWarning(absl::StrCat(
      "taking the stacks of this node's workers (",
      group_->stack_tool() ? group_->stack_tool()->name : "no eu-stack or gdb installed",
      "), then stopping them: ", plan.reason));
  group_->StopWithStacks(plan);
}

void Agent::StepIn() {
  if (!joined_) {
    joined_ = true;
    rendezvous_->Join(node_, this);
  } else {
    LogInfo("the health check passes again: this node rejoins the run as a new node");
    rendezvous_->StepIn();
  }
}

void Agent::ExitAgent(const AgentAction& action) {
  if (action.exit_code == kExitSuccess && setup_.grpc != nullptr) {
    // Let the success report reach the server before the stream goes away: exiting at once
    // would cancel the stream and read as a lost node. The server answers with a close; wait
    // for it, briefly.
    awaiting_close_ = true;
    loop_.AddTimerAfter(std::chrono::seconds(2), [this, action] {
      if (awaiting_close_) Finish(action.exit_code, action.message);
    });
  } else {
    Finish(action.exit_code, action.message);
  }
}

void Agent::StartWorkers(const rendezvous::Assignment& a) {
  if (const std::string glob = StacksGlob(); !glob.empty()) {
    std::string where;
    if (const auto& root = state_.previous_root_cause(); root.has_value() && !root->hang.empty()) {
      const std::vector<std::string> frames = group_->InnermostFrames(root->local_rank, 3);
      if (!frames.empty()) where = absl::StrCat("; rank ", root->rank, " was at ", frames[0]);
    }
    LogWarning(absl::StrCat("stacks of the hung attempt: ", glob, where));
  }
  current_ = a;
  ++attempt_;
  // A cold start of a one-node job: every worker of the round is new and this agent's, so the
  // store it finds can be new too (the previous workers may have left keys under the same
  // /worker/attempt_N prefix when only the restart count stayed). Not with several nodes: the
  // other nodes' workers of this round may already have written their keys (they start as soon
  // as their own predecessors stopped), so there the store keeps the job's keys under their
  // attempt prefixes, as torchrun's does. Not in in-process mode: survivors may already be
  // writing this round's keys (under its own prefix).
  if (setup_.store != nullptr && !reform_ && options_.max_nodes == 1) setup_.store->Clear();
  for (LocalRankRecord& rank : ranks_) rank.exit.reset();
  OpenFilteredLogs();
  std::vector<WorkerLaunch> launches;
  const int nproc = options_.nproc_per_node;
  for (int lr = 0; lr < nproc; ++lr) launches.push_back(MakeLaunch(lr, a));
  if (group_) KillWhatWorkersLeft();  // the previous group's detached processes
  if (reform_) {
    reform_->OnGroupReplaced();
    reform_->BeginRound(a, {});  // every worker gets its round message in reply to its hello
  }
  group_ = std::make_unique<WorkerGroup>(&loop_, this, options_.stop_timeout, &guard_,
                                         hangs_.enabled() ? FindStackTool(env_) : std::nullopt,
                                         spares_.get());
  LogInfo(absl::StrCat("round ", a.round, ": starting ", nproc, " worker(s), ", DescribeRound(a)));
  LaunchInGroup(std::move(launches), "worker(s)");
  const std::vector<pid_t> pids = group_->LivePids();
  started_worker_pids_ = std::set<pid_t>(pids.begin(), pids.end());
  // Their memory cgroups' OOM counts before they can allocate anything.
  if (explainer_ != nullptr) explainer_->Watch(pids);
  WorkersStarted(a, nproc, /*kept=*/-1);
}

std::string Agent::DescribeRound(const rendezvous::Assignment& a) const {
  return absl::StrCat("ranks ", a.rank_offset, "-", a.rank_offset + options_.nproc_per_node - 1,
                      " of ", a.world_size, " (node ", a.group_rank, " of ", a.group_world_size,
                      "), master ", a.master_addr, ":", a.master_port,
                      a.restart_count > 0 ? absl::StrCat(", restart ", a.restart_count) : "");
}

void Agent::LaunchInGroup(std::vector<WorkerLaunch> launches, const char* what) {
  const int handed_before = spares_ ? spares_->handed_over() : 0;
  const size_t count = launches.size();
  group_->Start(std::move(launches));
  if (spares_) {
    LogInfo(absl::StrCat("preload: ", spares_->handed_over() - handed_before, " of ", count, " ",
                         what, " started from spares"));
  }
}

void Agent::WorkersStarted(const rendezvous::Assignment& a, int started, int kept) {
  hangs_.OnGroupStarted(group_.get());
  compute_.Clear();  // the last round's step times say nothing of this world's
  StepEvent step{Step::kWorkersStarted};
  step.round = a.round;
  step.workers = started;
  step.kept = kept;
  step.restart_count = a.restart_count;
  RecordStep(step);
  rendezvous_->ReportGroupState(a.round, rendezvous::GroupState::kRunning, std::nullopt);
}

void Agent::ReformWorkers(const rendezvous::Assignment& a, const std::vector<int>& start) {
  current_ = a;
  ++attempt_;
  std::vector<WorkerLaunch> launches;
  std::vector<int> kept;
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    if (std::find(start.begin(), start.end(), lr) != start.end()) {
      launches.push_back(MakeLaunch(lr, a));
    } else {
      kept.push_back(lr);
    }
  }
  LogInfo(absl::StrCat("round ", a.round, ": in-process recovery, ", kept.size(),
                       " worker(s) kept, ", launches.size(), " started; ", DescribeRound(a)));
  reform_->BeginRound(a, kept, start);
  if (!launches.empty()) {
    KillWhatWorkersLeft();  // what the failed workers detached
    LaunchInGroup(std::move(launches), "replacement(s)");
    if (explainer_ != nullptr) explainer_->Watch(group_->LivePids());
  }
  WorkersStarted(a, static_cast<int>(start.size()), static_cast<int>(kept.size()));
}

WorkerLaunch Agent::MakeLaunch(int lr, const rendezvous::Assignment& a) {
  ranks_[lr].attempt = attempt_;
  ranks_[lr].exit.reset();
  const std::string dir = absl::StrCat(log_root_, "/attempt_", attempt_, "/", lr);
  if (absl::Status s = MakeDirs(dir); !s.ok()) LogWarning(s.message());
  WorkerEnvSpec spec = EnvSpec(lr);
  spec.error_file = ErrorFilePath(attempt_, lr);
  unlink(spec.error_file.c_str());  // a stale file must not be mistaken for this attempt's

  WorkerLaunch launch;
  launch.local_rank = lr;
  launch.rank = a.rank_offset + lr;
  launch.spawn = WorkerSpawn(lr, BuildWorkerEnv(env_, spec, a));
  launch.python = options_.entrypoint_kind != EntrypointKind::kBinary;
  launch.stacks_path = absl::StrCat(dir, "/stacks.txt");

  // Console and log files, as torchrun's --redirects / --tee / --local-ranks-filter say.
  const bool visible =
      (options_.local_ranks_filter.empty() || options_.local_ranks_filter.count(lr) > 0) &&
      (options_.ranks_filter.empty() || options_.ranks_filter.count(launch.rank) > 0);
  const int redirect = options_.redirects.For(lr);
  const int tee = options_.tee.For(lr);
  const bool always_log = !options_.log_dir.empty();
  const bool templated = !options_.log_line_prefix_template.empty();
  const std::string prefix =
      templated
          ? SubstituteTemplate(options_.log_line_prefix_template,
                               LogLinePrefixValues(options_.role, launch.rank, lr, host_.hostname))
          : absl::StrCat("[", options_.role, lr, "]:");
  auto configure = [&](int bit, int console_fd, OutputStream::Config* config, std::string* log_path,
                       int* tty_of, const char* name) {
    const bool redirected = (redirect & bit) != 0 && (tee & bit) == 0;
    config->console_fd = visible && !redirected ? console_fd : -1;
    config->console =
        isatty(console_fd) ? OutputStream::Console::kTerminal : OutputStream::Console::kStream;
    config->console_writer = console_fd == 1 ? &stdout_writer_ : &stderr_writer_;
    // A stream shown as is on ddprun's terminal gets a terminal of its own (as under torchrun
    // without --tee, where the worker writes to that terminal itself); --tee gives pipes there.
    if (options_.worker_tty && config->console_fd >= 0 && (tee & bit) == 0 && isatty(console_fd)) {
      *tty_of = console_fd;
    }
    // An explicit template prefixes every console line; the default one only with --tee.
    if (templated || (tee & bit) != 0) config->prefix = prefix;
    if (always_log || ((redirect | tee) & bit) != 0) *log_path = absl::StrCat(dir, "/", name);
    config->filtered_fd = filtered_fds_[bit == kStdOut ? 0 : 1];
    config->filters =
        bit == kStdOut ? options_.duplicate_stdout_filters : options_.duplicate_stderr_filters;
    config->filtered_prefix = absl::StrCat("[", options_.role, lr, "]:");
  };
  configure(kStdOut, 1, &launch.stdout_config, &launch.stdout_log, &launch.stdout_tty_of,
            "stdout.log");
  configure(kStdErr, 2, &launch.stderr_config, &launch.stderr_log, &launch.stderr_tty_of,
            "stderr.log");
  return launch;
}

void Agent::OpenFilteredLogs() {
  const std::vector<std::string>* filters[2] = {&options_.duplicate_stdout_filters,
                                                &options_.duplicate_stderr_filters};
  const char* names[2] = {"filtered_stdout.log", "filtered_stderr.log"};
  for (int i = 0; i < 2; ++i) {
    if (filtered_fds_[i] >= 0) close(filtered_fds_[i]);
    filtered_fds_[i] = -1;
    if (filters[i]->empty()) continue;
    const std::string dir = absl::StrCat(log_root_, "/attempt_", attempt_);
    if (absl::Status s = MakeDirs(dir); !s.ok()) LogWarning(s.message());
    const std::string path = absl::StrCat(dir, "/", names[i]);
    filtered_fds_[i] = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (filtered_fds_[i] < 0) LogWarning(absl::StrCat(path, ": ", strerror(errno)));
  }
}

}  // namespace ddprun::launcher
