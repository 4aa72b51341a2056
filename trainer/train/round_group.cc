#include "trainer/train/round_group.h"

#include <torch/torch.h>

#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ddprun::trainer {

// The stores this process serves, kept for its whole life (a helper thread may add one).
// Thread-safe.
struct ServedStores {
  absl::Mutex mu;
  std::vector<c10::intrusive_ptr<c10d::Store>> stores ABSL_GUARDED_BY(mu);
};

namespace {

std::string FirstLineOf(const std::string& s) { return s.substr(0, s.find('\n')); }

// Waits that end when the collective completes or `round` is over. Work::wait(timeout) cannot
// serve: LibTorch 1.13 throws "Operation timed out" when its timeout passes, so it cannot be
// polled; the work's future (gloo's AsyncWork completes one) wakes the same condition variable
// as the control channel instead.
class RoundWaiter final : public CollectiveWaiter {
 public:
  RoundWaiter(control::ControlClient* control, std::shared_ptr<Wakeup> wakeup, int64_t round)
      : control_(control), wakeup_(std::move(wakeup)), round_(round) {}

  absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work) override {
    if (!work) return absl::OkStatus();
    c10::intrusive_ptr<c10::ivalue::Future> future;
    try {
      future = work->getFuture();
    } catch (const std::exception&) {
      return WaitWork(work);  // a backend whose works have no future: not abortable
    }
    // The callback owns the wakeup: it may fire long after this wait gave up.
    future->addCallback([wakeup = wakeup_](c10::ivalue::Future&) { wakeup->Notify(); });
    {
      absl::MutexLock lock(&wakeup_->mu);
      while (!(future->completed() || control_->RoundOver(round_))) {
        wakeup_->cv.Wait(&wakeup_->mu);
      }
    }
    // A collective that completed counts, even when the abort arrived meanwhile: the state
    // agreement then finds this rank one step further, and nobody recomputes it.
    if (future->completed()) return WaitWork(work);
    return absl::AbortedError(absl::StrCat("round ", round_, " is over"));
  }

 private:
  control::ControlClient* const control_;
  const std::shared_ptr<Wakeup> wakeup_;
  const int64_t round_;
};

// §6b.2's rule. Blocks (client connect retries) up to `timeout`.
absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectRoundStore(const DistEnv& env,
                                                                  std::chrono::milliseconds timeout,
                                                                  ServedStores* served) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.numWorkers = env.world_size;
  opts.waitWorkers = false;  // the process group's own rendezvous waits for everyone
  opts.timeout = timeout;
  // A port this process serves already (an earlier round's store) is reused, not bound again:
  // TCPServer keeps a per-process table of multi-tenant servers by port.
  opts.multiTenant = true;
  c10::intrusive_ptr<c10d::TCPStore> tcp;
  std::string serve_error;
  if (env.rank == 0 && !env.use_agent_store) {
    opts.isServer = true;
    try {
      tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
      absl::MutexLock lock(&served->mu);
      served->stores.push_back(tcp);
    } catch (const std::exception& e) {
      // Most likely the port is served by a surviving worker of an earlier round.
      serve_error = FirstLineOf(e.what());
    }
  }
  if (!tcp) {
    opts.isServer = false;
    try {
      tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
    } catch (const std::exception& e) {
      absl::Status s =
          CommError(absl::StrCat("c10d store at ", env.master_addr, ":", env.master_port), e);
      if (serve_error.empty()) return s;
      return absl::Status(s.code(),
                          absl::StrCat(s.message(), " (serving it failed too: ", serve_error, ")"));
    }
  }
  return c10::intrusive_ptr<c10d::Store>(
      c10::make_intrusive<c10d::PrefixStore>(env.store_prefix, tcp));
}

absl::StatusOr<std::unique_ptr<Communicator>> FormCommunicator(const DistEnv& env,
                                                               const CommOptions& options,
                                                               ServedStores* served) {
  if (env.world_size == 1) return CommunicatorOverStore({}, env, options);
  DDPRUN_ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::Store> store,
                          ConnectRoundStore(env, options.timeout, served));
  return CommunicatorOverStore(std::move(store), env, options);
}

}  // namespace

DistEnv RoundEnv(const DistEnv& env, const control::RoundMessage& round) {
  DistEnv out = env;
  out.rank = round.rank;
  out.world_size = round.world_size;
  out.local_rank = round.local_rank;
  out.local_world_size = round.local_world_size;
  out.master_addr = round.master_addr;
  out.master_port = round.master_port;
  out.restart_count = round.restart_count;
  out.store_prefix = round.store_prefix;
  // Kept from the start: under ddprun the agent serves the store for the whole job; elsewhere
  // (§6b.2) the workers serve it themselves.
  out.use_agent_store = env.use_agent_store;
  return out;
}

RoundGroup::RoundGroup(control::ControlClient* control, CommOptions options)
    : control_(control),
      options_(std::move(options)),
      wakeup_(std::make_shared<Wakeup>()),
      served_(std::make_shared<ServedStores>()) {
  control_->SetWakeup([wakeup = wakeup_] { wakeup->Notify(); });
}

RoundGroup::~RoundGroup() = default;

void RoundGroup::Drop(std::unique_ptr<Communicator> comm) { reaper_.Destroy(std::move(comm)); }

absl::StatusOr<std::unique_ptr<Communicator>> RoundGroup::Form(const DistEnv& env, int64_t round) {
  CommOptions options = options_;
  options.waiter = std::make_shared<RoundWaiter>(control_, wakeup_, round);
  // Shared with the helper thread, which may outlive this call.
  struct Forming {
    bool done = false;  // guarded by Wakeup::mu
    absl::StatusOr<std::unique_ptr<Communicator>> result;
  };
  auto forming = std::make_shared<Forming>();
  std::thread([forming, wakeup = wakeup_, served = served_, env, options] {
    absl::StatusOr<std::unique_ptr<Communicator>> result;
    try {
      result = FormCommunicator(env, options, served.get());
    } catch (const std::exception& e) {
      result = CommError("process group", e);
    }
    absl::MutexLock lock(&wakeup->mu);
    forming->result = std::move(result);
    forming->done = true;
    wakeup->cv.SignalAll();
  }).detach();
  absl::MutexLock lock(&wakeup_->mu);
  while (!(forming->done || control_->RoundOver(round))) wakeup_->cv.Wait(&wakeup_->mu);
  if (forming->done) return std::move(forming->result);
  // The helper stays blocked (in the store or the gloo rendezvous) until its own timeout, and
  // then destroys what it made on its own thread.
  return absl::AbortedError(absl::StrCat("round ", round, " is over"));
}

}  // namespace ddprun::trainer
