#include "trainer/train/comm.h"

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if defined(DDPRUN_WITH_CUDA) && defined(USE_C10D_NCCL)
#include <torch/cuda.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#define DDPRUN_HAVE_NCCL 1
#endif

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ddprun::trainer {
namespace {

// LibTorch 2.x split ProcessGroup (the user-facing group) from Backend (gloo, NCCL); the
// collectives we call have the same signatures on both.
#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// World size 1: nothing to talk to.
class SoloCommunicator final : public Communicator {
 public:
  explicit SoloCommunicator(CommBackend backend) : backend_(backend) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  CommBackend backend() const override { return backend_; }
  c10::intrusive_ptr<c10d::Work> AllReduceSumAsync(torch::Tensor& tensor) override {
    return c10::intrusive_ptr<c10d::Work>();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }

 protected:
  c10::intrusive_ptr<c10d::Work> BroadcastAsync(torch::Tensor& tensor, int root) override {
    return c10::intrusive_ptr<c10d::Work>();
  }
  c10::intrusive_ptr<c10d::Work> AllGatherAsync(std::vector<torch::Tensor>& out,
                                                torch::Tensor& in) override {
    out[0].copy_(in);
    return c10::intrusive_ptr<c10d::Work>();
  }

 private:
  CommBackend backend_;
};

class GroupCommunicator final : public Communicator {
 public:
  GroupCommunicator(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<BackendBase> group,
                    int rank, int world_size, const CommOptions& options)
      : Communicator(options.waiter),
        store_(std::move(store)),
        group_(std::move(group)),
        rank_(rank),
        world_size_(world_size),
        backend_(options.backend) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  CommBackend backend() const override { return backend_; }

  c10::intrusive_ptr<c10d::Work> AllReduceSumAsync(torch::Tensor& tensor) override {
    std::vector<torch::Tensor> tensors{tensor};
    return group_->allreduce(tensors, c10d::AllreduceOptions());
  }

  absl::Status Barrier() override {
    try {
      return Wait(group_->barrier(c10d::BarrierOptions()));
    } catch (const std::exception& e) {
      return CommError("barrier", e);
    }
  }

 protected:
  c10::intrusive_ptr<c10d::Work> BroadcastAsync(torch::Tensor& tensor, int root) override {
    std::vector<torch::Tensor> tensors{tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    return group_->broadcast(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> AllGatherAsync(std::vector<torch::Tensor>& out,
                                                torch::Tensor& in) override {
    std::vector<std::vector<torch::Tensor>> outputs{out};  // handles on out's storage
    std::vector<torch::Tensor> inputs{in};
    return group_->allgather(outputs, inputs, c10d::AllgatherOptions());
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;  // outlives the group that uses it
  c10::intrusive_ptr<BackendBase> group_;
  int rank_;
  int world_size_;
  CommBackend backend_;
};

absl::StatusOr<c10::intrusive_ptr<BackendBase>> MakeGroup(c10::intrusive_ptr<c10d::Store> store,
                                                          int rank, int world_size,
                                                          const CommOptions& options,
                                                          const std::string& ifname,
                                                          const std::string& master_addr) {
  try {
    if (options.backend == CommBackend::kNccl) {
#ifdef DDPRUN_HAVE_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = options.timeout;
      return c10::intrusive_ptr<BackendBase>(
          c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, opts));
#else
      return absl::FailedPreconditionError(
          "--backend=nccl: this ddp-train was built without CUDA/NCCL (DDPRUN_WITH_CUDA=OFF)");
#endif
    }
    auto opts = c10d::ProcessGroupGloo::Options::create(options.timeout);
    if (!ifname.empty()) {
      // torch's rule: GLOO_SOCKET_IFNAME picks the interface.
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (master_addr == "127.0.0.1" || master_addr == "localhost" || master_addr == "::1") {
      // Every rank is on this host: loopback works even where the hostname does not resolve.
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    opts->threads = 2;
    return c10::intrusive_ptr<BackendBase>(
        c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, opts));
  } catch (const std::exception& e) {
    return CommError(absl::StrCat(CommBackendName(options.backend), " process group"), e);
  }
}

}  // namespace

absl::StatusOr<CommBackend> ParseCommBackend(const std::string& name) {
  if (name == "gloo") return CommBackend::kGloo;
  if (name == "nccl") return CommBackend::kNccl;
  if (name == "auto") {
#ifdef DDPRUN_HAVE_NCCL
    if (torch::cuda::is_available()) return CommBackend::kNccl;
#endif
    return CommBackend::kGloo;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend=", name, ": expected gloo, nccl or auto"));
}

const char* CommBackendName(CommBackend backend) {
  return backend == CommBackend::kNccl ? "nccl" : "gloo";
}

absl::Status CommError(const std::string& what, const std::exception& e) {
  std::string msg = e.what();
  // c10::Error appends a C++ backtrace; keep the first line for a one-line message.
  if (size_t nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
  if (msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": ", msg));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", msg));
}

absl::Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work) return absl::OkStatus();
  try {
    work->wait();
  } catch (const std::exception& e) {
    return CommError("collective", e);
  }
  return absl::OkStatus();
}

absl::Status Communicator::Wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work) return absl::OkStatus();
  return waiter_ != nullptr ? waiter_->Wait(work) : WaitWork(work);
}

absl::Status Communicator::AllReduceSum(torch::Tensor& tensor) {
  try {
    return Wait(AllReduceSumAsync(tensor));
  } catch (const std::exception& e) {
    return CommError("all-reduce", e);
  }
}

absl::Status Communicator::Broadcast(torch::Tensor& tensor, int root) {
  try {
    return Wait(BroadcastAsync(tensor, root));
  } catch (const std::exception& e) {
    return CommError("broadcast", e);
  }
}

absl::StatusOr<std::vector<torch::Tensor>> Communicator::AllGather(const torch::Tensor& tensor) {
  std::vector<torch::Tensor> out;
  for (int r = 0; r < world_size(); ++r) out.push_back(torch::empty_like(tensor));
  torch::Tensor in = tensor;
  try {
    DDPRUN_RETURN_IF_ERROR(Wait(AllGatherAsync(out, in)));
  } catch (const std::exception& e) {
    return CommError("all-gather", e);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Communicator>> CommunicatorFromStore(
    c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, const CommOptions& options) {
  DDPRUN_ASSIGN_OR_RETURN(
      c10::intrusive_ptr<BackendBase> group,
      MakeGroup(store, rank, world_size, options, /*ifname=*/"", /*master_addr=*/"127.0.0.1"));
  return std::unique_ptr<Communicator>(
      new GroupCommunicator(std::move(store), std::move(group), rank, world_size, options));
}

absl::StatusOr<std::unique_ptr<Communicator>> CommunicatorOverStore(
    c10::intrusive_ptr<c10d::Store> store, const DistEnv& env, const CommOptions& options) {
  if (env.world_size == 1) {
    return std::unique_ptr<Communicator>(new SoloCommunicator(options.backend));
  }
  DDPRUN_ASSIGN_OR_RETURN(
      c10::intrusive_ptr<BackendBase> group,
      MakeGroup(store, env.rank, env.world_size, options, env.gloo_socket_ifname, env.master_addr));
  return std::unique_ptr<Communicator>(
      new GroupCommunicator(std::move(store), std::move(group), env.rank, env.world_size, options));
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectCommunicator(const DistEnv& env,
                                                                  const CommOptions& options) {
  if (env.world_size == 1) {
    return std::unique_ptr<Communicator>(new SoloCommunicator(options.backend));
  }
  c10::intrusive_ptr<c10d::Store> store;
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = !env.use_agent_store && env.rank == 0;
    opts.numWorkers = env.world_size;
    opts.waitWorkers = false;  // the process group's own rendezvous waits for everyone
    opts.timeout = options.timeout;
    opts.multiTenant = true;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    store = c10::make_intrusive<c10d::PrefixStore>(env.store_prefix, tcp);
  } catch (const std::exception& e) {
    return CommError(absl::StrCat("c10d store at ", env.master_addr, ":", env.master_port), e);
  }
  return CommunicatorOverStore(std::move(store), env, options);
}

}  // namespace ddprun::trainer
