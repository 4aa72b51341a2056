// The distributed environment a worker is started with, read once at start-up.
//
// Environment variables read by ddp-train (the one place they are listed):
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE  set by torchrun / ddprun
//   MASTER_ADDR, MASTER_PORT                        where the c10d TCPStore listens
//   TORCHELASTIC_RESTART_COUNT                      restart round (store key prefix)
//   TORCHELASTIC_USE_AGENT_STORE                    "True": the agent hosts the store, every
//                                                   rank is a client (torch's env:// rule)
//   TORCHELASTIC_ERROR_FILE                         where a fatal error is written as JSON
//   DDPRUN_ROUND                                    ddprun's rendezvous round: the store key
//                                                   prefix is scoped to it (it also changes on
//                                                   membership-only restarts, which do not
//                                                   increase TORCHELASTIC_RESTART_COUNT)
//   SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS       used when RANK is absent (direct srun)
//   SLURM_LAUNCH_NODE_IPADDR                        MASTER_ADDR fallback under srun
//   OMP_NUM_THREADS                                 intra-op threads (default 1 when >1 local
//                                                   processes)
//   GLOO_SOCKET_IFNAME                              network interface for gloo (torch's rule)
//   DDPRUN_PROGRESS_FILE                            FIFO for per-step reports to ddprun
//                                                   (step_report.h); empty or unset: none
//   DDPRUN_CONTROL_SOCKET                           ddprun's in-process recovery channel
//                                                   (docs/design.md §6b): the worker takes its
//                                                   rank, world and store from the agent's round
//                                                   messages and re-forms its group after a
//                                                   failure; empty or unset: cold mode
//   DDPRUN_LEASE_FD                                 ddprun's local lease (commit_guard.h):
//                                                   nothing is committed past it; empty or
//                                                   unset: no lease
// No variable set at all means a single process (world size 1, no communication).
#ifndef DDPRUN_TRAINER_IO_DIST_ENV_H_
#define DDPRUN_TRAINER_IO_DIST_ENV_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ddprun::trainer {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty when world_size == 1 and none given
  int master_port = 0;
  int restart_count = 0;
  bool use_agent_store = false;
  std::string store_prefix;  // every store key this worker uses starts with it
  std::string error_file;    // empty: none
  std::optional<int> omp_num_threads;
  std::string gloo_socket_ifname;
  std::string progress_file;   // empty: no step reports
  std::string control_socket;  // empty: cold mode (no in-process recovery)
  std::string lease_fd;        // DDPRUN_LEASE_FD as given; empty: no local lease
  // DDPRUN_CHECKPOINT_INTERVAL_ADVICE: the run's checkpoint advice at this worker's start.
  std::optional<double> checkpoint_advice_s;
  bool from_slurm = false;
};

using EnvGetter = std::function<std::optional<std::string>(const std::string&)>;

// The process environment.
EnvGetter ProcessEnv();

// kInvalidArgument naming the variable on malformed values (e.g. RANK >= WORLD_SIZE).
absl::StatusOr<DistEnv> ReadDistEnv(const EnvGetter& getenv);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_DIST_ENV_H_
