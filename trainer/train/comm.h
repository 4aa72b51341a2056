// The communication layer: a c10d store and a process group, and the handful of collectives
// ddp-train uses. Thin on purpose: it hides which LibTorch version (1.13: ProcessGroupGloo is a
// ProcessGroup; 2.x: it is a Backend) and which backend (gloo on CPU, NCCL in CUDA builds) is
// underneath. Every LibTorch exception is caught here and returned as a Status.
//
// Store: rank 0 hosts the c10d TCPStore at MASTER_ADDR:MASTER_PORT and the others connect,
// unless TORCHELASTIC_USE_AGENT_STORE=True (the agent hosts it; all ranks are clients) — the
// same rule as torch's env:// init. All keys go under DistEnv::store_prefix, which contains the
// restart count, so a restarted group never reads a key of an earlier round.
#ifndef DDPRUN_TRAINER_TRAIN_COMM_H_
#define DDPRUN_TRAINER_TRAIN_COMM_H_

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/io/dist_env.h"

namespace ddprun::trainer {

enum class CommBackend { kGloo, kNccl };

// "gloo", "nccl" or "auto" (NCCL when this build has CUDA and a GPU is present, else gloo).
absl::StatusOr<CommBackend> ParseCommBackend(const std::string& name);
const char* CommBackendName(CommBackend backend);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual CommBackend backend() const = 0;

  // Starts a sum all-reduce of `tensor` in place; wait on the returned work. May throw a
  // c10::Error (callers inside the train step catch it at the step boundary).
  virtual c10::intrusive_ptr<c10d::Work> AllReduceSumAsync(torch::Tensor& tensor) = 0;

  // Blocking collectives; errors (peer gone, timeout) as kUnavailable / kDeadlineExceeded.
  absl::Status AllReduceSum(torch::Tensor& tensor);
  absl::Status Broadcast(torch::Tensor& tensor, int root);
  virtual absl::Status Barrier() = 0;

 protected:
  virtual c10::intrusive_ptr<c10d::Work> BroadcastAsync(torch::Tensor& tensor, int root) = 0;
};

struct CommOptions {
  CommBackend backend = CommBackend::kGloo;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// Joins the group described by `env` (world size 1: a communicator whose collectives are
// no-ops, no store). kUnavailable when the store or the peers cannot be reached in time.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectCommunicator(const DistEnv& env,
                                                                  const CommOptions& options);

// For tests: a group over an existing store (e.g. a c10d::HashStore shared by threads).
absl::StatusOr<std::unique_ptr<Communicator>> CommunicatorFromStore(
    c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, const CommOptions& options);

// Waits for `work`; a Status instead of an exception.
absl::Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_COMM_H_
