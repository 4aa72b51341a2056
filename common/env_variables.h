// Every DDPRUN_* environment variable in one table: its name, type, default, who reads it and
// what it does. Code reads and sets these variables through the constants below (never a name
// spelled out elsewhere: tests/common/env_variables_test.cc checks the tree), and
// docs/reference/environment.md is generated from the table (`make flag-reference`).
// The table is constant; every function is thread-safe.
#ifndef DDPRUN_COMMON_ENV_VARIABLES_H_
#define DDPRUN_COMMON_ENV_VARIABLES_H_

#include <string>
#include <vector>

#include "common/environment.h"

namespace ddprun {

enum class VariableUse {
  kSetting,    // the user sets it for ddprun, ddprun-rdzv or ddprun status
  kToWorkers,  // ddprun sets it for its workers (or spares); they read it
  kTesting,    // a test hook: the tests point the program at a fake machine; never needed else
  kBuild,      // the build and packaging scripts (scripts/, the Makefile, packaging/)
};

struct EnvVariable {
  const char* name;
  const char* type;            // what a value is: "path", "1 or 0", "text", ...
  const char* default_value;   // what an unset variable means, for people
  const char* value_if_unset;  // what ReadVariable returns for an unset variable
  VariableUse use;
  const char* readers;  // the programs or files that read it
  const char* meaning;
};

// The programs' variables (the constant's name is the variable's, in CamelCase).
inline constexpr EnvVariable kRdzvTokenVariable{
    "DDPRUN_RDZV_TOKEN",
    "text",
    "none (no authentication)",
    "",
    VariableUse::kSetting,
    "ddprun, ddprun status, ddprun-rdzv",
    "The rendezvous's shared token (--rdzv-conf token_file and ddprun-rdzv --token-file "
    "take precedence). Never passed on to the workers; hidden from /proc/PID/environ."};
inline constexpr EnvVariable kEtcdPasswordVariable{
    "DDPRUN_ETCD_PASSWORD",
    "text",
    "none",
    "",
    VariableUse::kSetting,
    "ddprun, ddprun status",
    "The etcd password of --rdzv-conf etcd_user when no etcd_password_file is given."};
inline constexpr EnvVariable kNoSlurmVariable{
    "DDPRUN_NO_SLURM",
    "1 or 0 (true/false, yes/no, on/off)",
    "0",
    "",
    VariableUse::kSetting,
    "ddprun",
    "1: ignore the Slurm job's environment, as --no-slurm does."};
inline constexpr EnvVariable kNoPlatformVariable{
    "DDPRUN_NO_PLATFORM",
    "1 or 0 (true/false, yes/no, on/off)",
    "0",
    "",
    VariableUse::kSetting,
    "ddprun",
    "1: ignore MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK given by a platform, as "
    "--no-platform-env does."};
inline constexpr EnvVariable kKernelLogVariable{
    "DDPRUN_KERNEL_LOG",
    "path",
    "/dev/kmsg",
    "/dev/kmsg",
    VariableUse::kSetting,
    "ddprun",
    "The kernel log (in /dev/kmsg's record format) from which ddprun explains a worker killed "
    "by a signal (the OOM killer, a segfault, an NVIDIA Xid)."};
inline constexpr EnvVariable kGrpcPluginVariable{
    "DDPRUN_GRPC_PLUGIN",
    "path",
    "lib/ddprun/libddprun_grpc.so beside the bin folder of the running ddprun",
    "",
    VariableUse::kSetting,
    "ddprun, ddprun status",
    "The gRPC rendezvous plugin (c10d, etcd) to load instead of the installed one (not read by "
    "the static binaries, which link it in)."};
inline constexpr EnvVariable kSysfsRootVariable{
    "DDPRUN_SYSFS_ROOT",
    "path",
    "/sys",
    "/sys",
    VariableUse::kTesting,
    "ddprun",
    "Another tree shaped like /sys from which --numa-binding reads the machine's NUMA nodes, "
    "CPUs and GPUs: the tests' fake machines (tests/testing/fake_sysfs.h)."};
inline constexpr EnvVariable kRoundVariable{
    "DDPRUN_ROUND",
    "integer",
    "unset outside ddprun",
    "",
    VariableUse::kToWorkers,
    "workers (ddp-train, ddprun_inprocess)",
    "The rendezvous round the worker was started in, so that it can scope store keys to it."};
inline constexpr EnvVariable kProgressFileVariable{
    "DDPRUN_PROGRESS_FILE",
    "path of a FIFO",
    "unset: no step reports",
    "",
    VariableUse::kToWorkers,
    "workers (ddp-train, ddprun_inprocess)",
    "Where the worker writes its step reports (with \"compute_ms\", the slow-node judge's "
    "figure): signs of life for --hang-timeout, and the "
    "progress of the goodput ledger and the crash-loop check."};
inline constexpr EnvVariable kControlSocketVariable{
    "DDPRUN_CONTROL_SOCKET",
    "path of a Unix socket",
    "unset: no in-process recovery",
    "",
    VariableUse::kToWorkers,
    "workers (ddp-train, ddprun_inprocess)",
    "--restart-mode=in-process: the agent's control channel, on which a surviving worker hears "
    "of a new round and says it is ready."};
inline constexpr EnvVariable kCheckpointIntervalAdviceVariable{
    "DDPRUN_CHECKPOINT_INTERVAL_ADVICE",
    "seconds",
    "unset: no advice yet (no checkpoint save time reported)",
    "",
    VariableUse::kToWorkers,
    "workers (ddp-train --checkpoint-every=auto)",
    "The run's checkpoint interval advice when the worker started: seconds of training between "
    "checkpoints that maximise effective training time (Daly's optimum for the run's measured "
    "MTBF and save time, docs/design.md §3c). In-process, later changes come over the control "
    "channel (an \"advice\" message); a cold restart starts workers with the new one."};
inline constexpr EnvVariable kLeaseFdVariable{
    "DDPRUN_LEASE_FD",
    "file descriptor number",
    "unset: no local lease (the worker commits as it always did)",
    "",
    VariableUse::kToWorkers,
    "workers (ddp-train, ddprun_inprocess)",
    "--rdzv-backend=c10d or etcd: a read-only shared-memory page (common/lease_page.h) whose "
    "valid_until (CLOCK_MONOTONIC ns, little-endian int64 at byte 8) the agent moves on each "
    "time the rendezvous server answers it (etcd: renews its lease), or its liveness path acks "
    "it. A worker commits nothing (step, checkpoint, "
    "pointer) past it: in-process it waits for the next round, otherwise ddp-train exits 75 "
    "(docs/design.md, \"Fencing\")."};
inline constexpr EnvVariable kPreloadFdVariable{
    "DDPRUN_PRELOAD_FD",
    "file descriptor number",
    "unset: not a spare",
    "",
    VariableUse::kToWorkers,
    "spares (ddprun's sitecustomize hook, ddp-train)",
    "--preload: the socket on which a spare waits for its hand-over (the worker's environment "
    "and streams)."};
inline constexpr EnvVariable kPreloadIdleVariable{
    "DDPRUN_PRELOAD_IDLE",
    "1 or 0",
    "0",
    "",
    VariableUse::kToWorkers,
    "spares (ddprun's sitecustomize hook, ddp-train)",
    "--preload: 1 when the spare must warm up at SCHED_IDLE (workers are running)."};
inline constexpr EnvVariable kPreloadModulesVariable{
    "DDPRUN_PRELOAD_MODULES",
    "comma-separated module names",
    "none",
    "",
    VariableUse::kToWorkers,
    "spares (ddprun's sitecustomize hook)",
    "--preload: the modules a Python spare imports ahead of its hand-over."};
inline constexpr EnvVariable kPreloadProbeVariable{
    "DDPRUN_PRELOAD_PROBE",
    "1",
    "unset",
    "",
    VariableUse::kToWorkers,
    "ddprun's sitecustomize hook",
    "--preload: set for the one probe interpreter ddprun starts to check that the hook loads; "
    "the hook then only exits 0."};
inline constexpr EnvVariable kPreloadPythonpathVariable{
    "DDPRUN_PRELOAD_PYTHONPATH",
    "PYTHONPATH",
    "unset",
    "",
    VariableUse::kToWorkers,
    "ddprun's sitecustomize hook",
    "--preload: the worker's own PYTHONPATH, which the hook restores after ddprun put its own "
    "folder first."};

// The build and packaging scripts' variables.
inline constexpr EnvVariable kCacheVariable{
    "DDPRUN_CACHE",
    "path",
    "~/.cache/ddprun",
    "",
    VariableUse::kBuild,
    "scripts/build-static-microhttpd.sh, scripts/make-arm64-sysroot.sh",
    "Where slow-to-make build inputs are kept between builds (the static libmicrohttpd, the "
    "arm64 sysroot)."};
inline constexpr EnvVariable kArm64SysrootVariable{
    "DDPRUN_ARM64_SYSROOT",
    "path",
    "none",
    "",
    VariableUse::kBuild,
    "cmake/toolchain-aarch64-linux-gnu.cmake (`make aarch64`, scripts/make-dist.sh)",
    "The Debian arm64 sysroot the aarch64 cross build compiles against."};
inline constexpr EnvVariable kTorch2VenvVariable{
    "DDPRUN_TORCH2_VENV",
    "path",
    "~/.cache/ddprun/venv-torch-2.11.0",
    "",
    VariableUse::kBuild,
    "scripts/install-torch2.sh, scripts/build-torch2.sh, scripts/make-train-wheel.sh",
    "The torch 2.x virtual environment of the torch 2.x tests and the LibTorch 2.x build."};
inline constexpr EnvVariable kNoTorch2Variable{
    "DDPRUN_NO_TORCH2",
    "1",
    "unset",
    "",
    VariableUse::kBuild,
    "scripts/install-torch2.sh",
    "1: do not install torch 2.x; its tests then fail loudly saying so."};
inline constexpr EnvVariable kDistVenvVariable{
    "DDPRUN_DIST_VENV",
    "path",
    "~/.cache/ddprun/venv-dist",
    "",
    VariableUse::kBuild,
    "scripts/make-train-wheel.sh",
    "The virtual environment with the pinned packaging tools (scripts/install-dist-tools.sh)."};
inline constexpr EnvVariable kToolsVenvVariable{
    "DDPRUN_TOOLS_VENV",
    "path",
    "~/.cache/ddprun/venv-tools",
    "",
    VariableUse::kBuild,
    "scripts/install-tools.sh, `make docs`",
    "The virtual environment with the pinned developer tools (MkDocs for `make docs`)."};
inline constexpr EnvVariable kRdzvHostVariable{
    "DDPRUN_RDZV_HOST",
    "address",
    "127.0.0.1",
    "",
    VariableUse::kBuild,
    "the ddprun-rdzv systemd service (/etc/default/ddprun-rdzv)",
    "The address the packaged ddprun-rdzv service listens on."};
inline constexpr EnvVariable kRdzvPortVariable{
    "DDPRUN_RDZV_PORT",
    "port",
    "29400",
    "",
    VariableUse::kBuild,
    "the ddprun-rdzv systemd service (/etc/default/ddprun-rdzv)",
    "The port the packaged ddprun-rdzv service listens on."};
inline constexpr EnvVariable kRdzvArgsVariable{
    "DDPRUN_RDZV_ARGS",
    "ddprun-rdzv flags",
    "none",
    "",
    VariableUse::kBuild,
    "the ddprun-rdzv systemd service (/etc/default/ddprun-rdzv)",
    "More flags for the packaged ddprun-rdzv service."};

// Every variable above, programs' first.
std::vector<EnvVariable> DdprunVariables();

// The value of `v` in `env` (empty when set empty), `v.value_if_unset` when unset.
std::string ReadVariable(const Environment& env, const EnvVariable& v);
// The same from this process's own environment.
std::string ReadProcessVariable(const EnvVariable& v);

// docs/reference/environment.md: the table as Markdown.
std::string EnvironmentReferenceMarkdown();

}  // namespace ddprun

#endif  // DDPRUN_COMMON_ENV_VARIABLES_H_
