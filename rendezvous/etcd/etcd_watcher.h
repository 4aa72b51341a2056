// EtcdWatcher: one etcd watch on a key prefix that survives the loss of the member it is
// connected to. It resumes on another endpoint from the revision after the last event it
// delivered, so no event is missed or delivered twice across reconnects.
//
// Runs its own thread (a blocking gRPC stream read); `on_events` and `on_failed` are called on
// that thread, in revision order. Destruction cancels the stream and joins the thread.
// Thread-safe: the destructor may run on any thread; the rest is the watcher thread's.
#ifndef DDPRUN_RENDEZVOUS_ETCD_ETCD_WATCHER_H_
#define DDPRUN_RENDEZVOUS_ETCD_ETCD_WATCHER_H_

#include <condition_variable>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/std_mutex.h"
#include "proto/etcd/kv.pb.h"
#include "rendezvous/etcd/etcd_client.h"

namespace grpc {
class ClientContext;
}

namespace ddprun::rendezvous {

class EtcdWatcher {
 public:
  using EventsFn = std::function<void(std::vector<mvccpb::Event> events)>;
  // The watch cannot go on (its start revision was compacted away): events were lost.
  using FailedFn = std::function<void(absl::Status status)>;

  // Delivers every event on keys starting with `prefix` with revision >= `start_revision`.
  EtcdWatcher(EtcdClient* client, std::string prefix, int64_t start_revision, EventsFn on_events,
              FailedFn on_failed);
  ~EtcdWatcher() ABSL_LOCKS_EXCLUDED(mu_);
  EtcdWatcher(const EtcdWatcher&) = delete;
  EtcdWatcher& operator=(const EtcdWatcher&) = delete;

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // One stream on one endpoint until it ends; false: stop for good.
  bool WatchOnce() ABSL_LOCKS_EXCLUDED(mu_);

  EtcdClient* const client_;
  const std::string prefix_;
  const EventsFn on_events_;
  const FailedFn on_failed_;
  int64_t next_revision_;  // watcher thread only

  // A StdMutex: the pause between two members waits on the steady clock (common/std_mutex.h).
  StdMutex mu_;
  std::condition_variable wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // the open stream, to cancel it
  std::thread thread_;
};

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_ETCD_ETCD_WATCHER_H_
