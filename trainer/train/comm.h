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

// How a communicator waits for its collectives. Without one it is LibTorch's own Work::wait()
// (until the collective completes, fails or times out). In-process recovery
// (round_group.h) supplies one that also returns as soon as the round is over. Thread-safe.
class CollectiveWaiter {
 public:
  virtual ~CollectiveWaiter() = default;
  // The collective's own status when it completed; kAborted when the wait was given up.
  virtual absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work) = 0;
};

// "gloo", "nccl" or "auto" (NCCL when this build has CUDA and a GPU is present, else gloo).
absl::StatusOr<CommBackend> ParseCommBackend(const std::string& name);
const char* CommBackendName(CommBackend backend);

class Communicator {
 public:
  explicit Communicator(std::shared_ptr<CollectiveWaiter> waiter = nullptr)
      : waiter_(std::move(waiter)) {}
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual CommBackend backend() const = 0;

  // Starts a sum all-reduce of `tensor` in place; wait on the returned work. May throw a
  // c10::Error (callers inside the train step catch it at the step boundary).
  virtual c10::intrusive_ptr<c10d::Work> AllReduceSumAsync(torch::Tensor& tensor) = 0;

  // Waits for a work this communicator started (null: done); through the waiter when there is
  // one. Errors (peer gone, timeout) as kUnavailable / kDeadlineExceeded; kAborted when the
  // waiter gave up.
  absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work);

  // Blocking collectives; errors as Wait's.
  absl::Status AllReduceSum(torch::Tensor& tensor);
  absl::Status Broadcast(torch::Tensor& tensor, int root);
  // Every rank's `tensor` (the same shape and dtype on every rank), in rank order: unlike a sum
  // of slots, each rank's part comes from that rank alone.
  absl::StatusOr<std::vector<torch::Tensor>> AllGather(const torch::Tensor& tensor);
  virtual absl::Status Barrier() = 0;

 protected:
  virtual c10::intrusive_ptr<c10d::Work> BroadcastAsync(torch::Tensor& tensor, int root) = 0;
  // Fills `out` (world_size tensors shaped like `in`) with every rank's `in`.
  virtual c10::intrusive_ptr<c10d::Work> AllGatherAsync(std::vector<torch::Tensor>& out,
                                                        torch::Tensor& in) = 0;

 private:
  std::shared_ptr<CollectiveWaiter> waiter_;
};

struct CommOptions {
  CommBackend backend = CommBackend::kGloo;
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  std::shared_ptr<CollectiveWaiter> waiter;  // null: Work::wait()
};

// Joins the group described by `env` (world size 1: a communicator whose collectives are
// no-ops, no store). kUnavailable when the store or the peers cannot be reached in time.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectCommunicator(const DistEnv& env,
                                                                  const CommOptions& options);

// The group of `env`'s rank and world size over `store` (kept alive by the communicator): what
// ConnectCommunicator does once it has its store. Blocks until every rank has joined or
// `options.timeout`; world size 1 needs no store.
absl::StatusOr<std::unique_ptr<Communicator>> CommunicatorOverStore(
    c10::intrusive_ptr<c10d::Store> store, const DistEnv& env, const CommOptions& options);

// For tests: a group over an existing store (e.g. a c10d::HashStore shared by threads).
absl::StatusOr<std::unique_ptr<Communicator>> CommunicatorFromStore(
    c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, const CommOptions& options);

// Waits for `work` with Work::wait(); a Status instead of an exception.
absl::Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work);

// A LibTorch exception as a one-line Status: kDeadlineExceeded for time-outs, else
// kUnavailable; `what` names the operation.
absl::Status CommError(const std::string& what, const std::exception& e);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_TRAIN_COMM_H_
