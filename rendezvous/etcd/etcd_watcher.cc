#include "rendezvous/etcd/etcd_watcher.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/etcd/rpc.grpc.pb.h"

namespace ddprun::rendezvous {

EtcdWatcher::EtcdWatcher(EtcdClient* client, std::string prefix, int64_t start_revision,
                         EventsFn on_events, FailedFn on_failed)
    : client_(client),
      prefix_(std::move(prefix)),
      on_events_(std::move(on_events)),
      on_failed_(std::move(on_failed)),
      next_revision_(start_revision) {
  thread_ = std::thread([this] { Run(); });
}

EtcdWatcher::~EtcdWatcher() {
  {
    StdMutexLock lock(&mu_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  wake_.notify_all();
  thread_.join();
}

void EtcdWatcher::Run() {
  while (WatchOnce()) {
    // The member went away (or lost its leader): try the next one after a short pause, so a
    // cluster with no member up is not spun on. Woken at once by the destructor.
    StdMutexLock lock(&mu_);
    if (lock.WaitFor(&wake_, std::chrono::milliseconds(100),
                     [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; })) {
      return;
    }
  }
}

bool EtcdWatcher::WatchOnce() {
  size_t index = 0;
  std::shared_ptr<grpc::Channel> channel = client_->CurrentChannel(&index);
  grpc::ClientContext context;
  client_->AddMetadata(&context).IgnoreError();
  {
    StdMutexLock lock(&mu_);
    if (stopping_) return false;
    context_ = &context;
  }
  auto stub = etcdserverpb::Watch::NewStub(channel);
  auto stream = stub->Watch(&context);
  etcdserverpb::WatchRequest request;
  auto* create = request.mutable_create_request();
  create->set_key(prefix_);
  create->set_range_end(EtcdPrefixEnd(prefix_));
  create->set_start_revision(next_revision_);
  bool keep_going = true;
  if (stream->Write(request)) {
    etcdserverpb::WatchResponse response;
    while (stream->Read(&response)) {
      if (response.compact_revision() > 0) {
        on_failed_(absl::DataLossError(absl::StrCat(
            "etcd watch on ", prefix_, ": revision ", next_revision_, " was compacted (now ",
            response.compact_revision(), "); events were lost")));
        keep_going = false;
        break;
      }
      if (response.canceled()) break;  // e.g. the member lost its leader: go elsewhere
      if (response.events_size() == 0) continue;
      std::vector<mvccpb::Event> events(response.events().begin(), response.events().end());
      next_revision_ = events.back().kv().mod_revision() + 1;
      on_events_(std::move(events));
    }
  }
  context.TryCancel();
  stream->Finish().IgnoreError();
  {
    StdMutexLock lock(&mu_);
    context_ = nullptr;
    if (stopping_) return false;
  }
  client_->Failover(index);
  return keep_going;
}

}  // namespace ddprun::rendezvous
