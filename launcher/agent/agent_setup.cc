#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/env_variables.h"
#include "common/file_text.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/temp_dir.h"
#include "launcher/agent/agent.h"
#include "launcher/workers/worker_command.h"
#include "launcher/workers/worker_env.h"
#include "python/inprocess_module_py.h"

namespace ddprun::launcher {

absl::Status Agent::Prepare() {
  // Orphaned grandchildren of workers are re-parented to us, not to init, so we can reap them
  // and no zombie outlives the job.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (absl::Status s = PlanNumaBinding(); !s.ok()) return s;
  // Before the rendezvous (which may start gRPC threads): the guard is a plain fork.
  if (absl::Status s = guard_.Start(); !s.ok()) return s;

  auto setup = SetUpRendezvous(options_, host_, &loop_);
  if (!setup.ok()) return setup.status();
  setup_ = std::move(*setup);
  rendezvous_ = setup_.rendezvous.get();
  run_id_ = setup_.run_id;

  if (absl::Status s = PrepareLogRoot(); !s.ok()) return s;

  // The step reports' pipe (the goodput ledger, hang detection), the FileTimer's and the
  // control socket live in a private directory.
  absl::StatusOr<std::string> dir = MakeTempDir("ddprun-ipc");
  if (!dir.ok()) return dir.status();
  ipc_dir_ = *std::move(dir);
  if (absl::Status s = hangs_.Start(ipc_dir_); !s.ok()) return s;
  if (absl::Status s = StartInProcessRounds(); !s.ok()) return s;

  if (absl::Status s = StartSpares(); !s.ok()) return s;

  PrepareReadiness();
  return WatchSignals();
}

absl::Status Agent::PrepareLogRoot() {
  if (!options_.log_dir.empty()) {
    if (auto s = MakeDirs(options_.log_dir); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--log-dir=", s.message()));
    }
    // Never overwrite the logs of an earlier job with the same run id.
    log_root_ = absl::StrCat(options_.log_dir, "/", run_id_);
    for (int n = 2; std::filesystem::exists(log_root_); ++n) {
      log_root_ = absl::StrCat(options_.log_dir, "/", run_id_, "-", n);
    }
    if (auto s = MakeDirs(log_root_); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--log-dir=", s.message()));
    }
  } else {
    absl::StatusOr<std::string> dir = MakeTempDir("ddprun");
    if (!dir.ok()) return dir.status();
    log_root_ = *std::move(dir);
    log_root_is_temp_ = true;
  }

  timeline_ = std::make_unique<RunTimeline>(run_id_, host_.hostname);
  if (!options_.log_dir.empty()) {
    const std::string events = absl::StrCat(log_root_, "/events.jsonl");
    events_fd_ = open(events.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (events_fd_ < 0) LogWarning(absl::StrCat(events, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

void Agent::PrepareReadiness() {
  if (!nvidia_smi_.empty()) {
    GpuReleaseOptions gpu;
    gpu.nvidia_smi = nvidia_smi_;
    gpu.timeout = options_.gpu_release_timeout;
    gpu.env = WithoutAgentOnlyVariables(env_);
    gpu_release_ = std::make_unique<GpuReleaseWait>(&loop_, std::move(gpu));
  }
  if (!options_.health_check.empty()) {
    HealthCheckOptions check;
    check.command = options_.health_check;
    check.timeout = options_.health_check_timeout;
    check.env = WithoutAgentOnlyVariables(env_);
    health_ = std::make_unique<HealthCheck>(&loop_, std::move(check));
  }
}

rendezvous::NodeInfo Agent::MakeNodeInfo() const {
  rendezvous::NodeInfo node;
  node.run_id = run_id_;
  node.hostname = host_.hostname;
  node.node_id = absl::StrCat(host_.hostname, "_", getpid(), "_", RandomHex(4));
  node.min_nodes = options_.min_nodes;
  node.max_nodes = options_.max_nodes;
  node.max_restarts = options_.max_restarts;
  node.nproc_per_node = options_.nproc_per_node;
  node.requested_node_rank = options_.node_rank;
  node.local_addr = options_.local_addr;
  node.master_port = setup_.store != nullptr ? setup_.store->port() : 0;
  node.preflight_port = probe_listener_ != nullptr ? probe_listener_->port() : 0;
  return node;
}

absl::Status Agent::PlanNumaBinding() {
  if (!options_.numa_binding.has_value()) return absl::OkStatus();
  const std::string flag = absl::StrCat("--numa-binding=", options_.numa_binding_name, ": ");
  auto topology = NumaTopology::Read(ReadVariable(env_, kSysfsRootVariable));  // a test hook
  if (!topology.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, topology.status().message()));
  }
  auto visible = env_.find("CUDA_VISIBLE_DEVICES");
  auto gpus =
      GpuIndexOfLocalRanks(visible != env_.end() ? visible->second : "", options_.nproc_per_node);
  if (!gpus.ok()) return gpus.status();
  const std::set<int> allowed = AllowedCpus();
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    auto cpus = topology->CpusFor((*gpus)[lr], *options_.numa_binding, allowed);
    if (!cpus.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "local rank ", lr, ": ", cpus.status().message()));
    }
    LogInfo(absl::StrCat("numa binding (", options_.numa_binding_name, "): local rank ", lr,
                         " -> GPU ", (*gpus)[lr], " (", topology->gpu_addresses()[(*gpus)[lr]],
                         "): CPUs ", FormatCpuList(*cpus)));
    ranks_[lr].cpus = *std::move(cpus);
  }
  return absl::OkStatus();
}

WorkerEnvSpec Agent::EnvSpec(int lr) const {
  WorkerEnvSpec spec;
  spec.run_id = run_id_;
  spec.role = options_.role;
  spec.local_rank = lr;
  spec.local_world_size = options_.nproc_per_node;
  spec.max_restarts = options_.max_restarts;
  spec.signals_to_handle = options_.signals_to_handle;
  if (options_.virtual_local_rank) spec.virtual_gpu = options_.virtual_gpus.at(lr);
  return spec;
}

absl::Status Agent::StartInProcessRounds() {
  if (options_.restart_mode != RestartMode::kInProcess) return absl::OkStatus();
  InProcessRounds::Hooks hooks;
  hooks.local_rank_of_pid = [this](pid_t pid) {
    return group_ ? group_->LocalRankOfDescendant(pid) : -1;
  };
  hooks.worker_pid = [this](int lr) { return group_ ? group_->Pid(lr) : 0; };
  hooks.on_speaks = [this](int lr) { state_.OnWorkerSpeaks(lr); };
  hooks.round_running = [this] { return state_.phase() == AgentStateMachine::Phase::kRunning; };
  hooks.kill_worker = [this](int lr) {
    if (group_) group_->KillWorker(lr);
  };
  hooks.on_all_ready = [this](int64_t round, int64_t step) {
    StepEvent restored{Step::kStateRestored};
    restored.round = round;
    restored.detail = absl::StrCat("step ", step);
    restored.state_step = step;
    RecordStep(restored);
  };
  // The Python module (python/ddprun_inprocess.py, compiled in) goes on the workers'
  // PYTHONPATH from the private directory: the version that speaks this agent's protocol.
  module_dir_ = absl::StrCat(ipc_dir_, "/python");
  if (absl::Status s = MakeDirs(module_dir_); !s.ok()) return s;
  const std::string module = absl::StrCat(module_dir_, "/", python::kInProcessModuleFileName);
  const int fd = open(module.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const bool written = fd >= 0 && WriteAll(fd, python::kInProcessModuleSource);
  if (fd >= 0) close(fd);
  if (!written) return absl::InternalError(absl::StrCat(module, ": ", strerror(errno)));
  auto rounds = InProcessRounds::Start(&loop_, options_.nproc_per_node, options_.reform_timeout,
                                       absl::StrCat(ipc_dir_, "/control"), std::move(hooks));
  if (!rounds.ok()) return rounds.status();
  reform_ = *std::move(rounds);
  return absl::OkStatus();
}

SpawnRequest Agent::WorkerSpawn(int lr, Environment env) const {
  SpawnRequest spawn;
  spawn.env = std::move(env);
  hangs_.AddWorkerEnv(lr, options_.entrypoint_kind != EntrypointKind::kBinary, &spawn.env);
  if (setup_.lease != nullptr) {
    spawn.env[kLeaseFdVariable.name] = absl::StrCat(setup_.lease->worker_fd());
  } else {
    spawn.env.erase(kLeaseFdVariable.name);  // an outer ddprun's, not this agent's
  }
  if (checkpoint_advice_s_ > 0) {
    spawn.env[kCheckpointIntervalAdviceVariable.name] =
        absl::StrFormat("%.3f", checkpoint_advice_s_);
  } else {
    spawn.env.erase(kCheckpointIntervalAdviceVariable.name);  // an outer ddprun's, not this run's
  }
  if (reform_) {
    spawn.env[control::kControlSocketEnv] = reform_->socket_path();
    std::string& path = spawn.env["PYTHONPATH"];
    path = path.empty() ? module_dir_ : absl::StrCat(module_dir_, ":", path);
  }
  WorkerCommand command = BuildWorkerCommand(options_, env_, lr);
  spawn.program = std::move(command.program);
  spawn.argv = std::move(command.argv);
  spawn.cpus = ranks_[lr].cpus;
  return spawn;
}

absl::Status Agent::StartSpares() {
  if (options_.preload_kind == PreloadKind::kOff) return absl::OkStatus();
  std::vector<SpawnRequest> templates;
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    templates.push_back(WorkerSpawn(lr, BuildSpareEnv(env_, EnvSpec(lr))));
  }
  const SpareHook hook = options_.preload_kind == PreloadKind::kNative
                             ? SpareHook::kNativeProgram
                             : SpareHook::kPythonSitecustomize;
  spares_ = std::make_unique<SparePool>(&loop_, &guard_, hook, options_.preload);
  return spares_->Start(std::move(templates));
}

absl::Status Agent::MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace ddprun::launcher
