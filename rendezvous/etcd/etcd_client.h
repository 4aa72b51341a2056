// EtcdClient: the calls ddprun's etcd rendezvous makes to an etcd v3 cluster (KV, Lease, Auth),
// with failover between the cluster's endpoints. One gRPC channel per endpoint; a call goes to
// the endpoint that last answered and, when that one is unreachable or has no leader, moves on
// to the next until the call's budget is spent.
//
// Authentication: with a user, the client calls Auth.Authenticate and sends the token as the
// "token" metadata of every call, authenticating again when etcd says the token is no longer
// valid. TLS: TlsClientFiles as for the built-in server.
//
// Calls block the calling thread (at most the budget); the etcd rendezvous makes them only from
// its own threads, never from the agent's loop. Thread-safe.
#ifndef DDPRUN_RENDEZVOUS_ETCD_ETCD_CLIENT_H_
#define DDPRUN_RENDEZVOUS_ETCD_ETCD_CLIENT_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "proto/etcd/rpc.grpc.pb.h"
#include "rendezvous/grpc/security.h"

namespace ddprun::rendezvous {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port" of any members of the cluster
  std::string user;                    // empty: etcd without authentication
  std::string password;
  TlsClientFiles tls;
  // Deadline of one attempt on one endpoint; a call tries the endpoints in turn within its
  // budget.
  std::chrono::milliseconds attempt_timeout{2000};
  // With several endpoints: how long a call waits for an endpoint's connection before it tries
  // the next one (a member that is down refuses at once; one being partitioned takes longer).
  std::chrono::milliseconds connect_timeout{250};
};

// "a/b/" -> "a/b0": the range_end that makes [key, range_end) the keys starting with `prefix`.
std::string EtcdPrefixEnd(const std::string& prefix);

class EtcdClient {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);

  // Each returns kUnavailable naming the endpoints when no member answered within `budget`,
  // kUnauthenticated / kPermissionDenied for refused credentials, else etcd's error.
  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& r,
                                                    Duration budget);
  absl::StatusOr<etcdserverpb::PutResponse> Put(const etcdserverpb::PutRequest& r, Duration budget);
  absl::StatusOr<etcdserverpb::DeleteRangeResponse> DeleteRange(
      const etcdserverpb::DeleteRangeRequest& r, Duration budget);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& r, Duration budget);
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(int64_t ttl_seconds, Duration budget);
  absl::Status LeaseRevoke(int64_t lease, Duration budget);
  // One round trip on a LeaseKeepAlive stream. kNotFound when the lease is gone.
  absl::StatusOr<int64_t> KeepAliveOnce(int64_t lease, Duration budget);

  // Makes calls in progress give up at their next attempt (within attempt_timeout) and fail
  // with kCancelled until Resume(): an agent that leaves must not wait out a long budget.
  void Abort() { aborted_.store(true); }
  void Resume() { aborted_.store(false); }

  // For the watcher: the channel to use next and the metadata every call carries.
  std::shared_ptr<grpc::Channel> CurrentChannel(size_t* index);
  // The endpoint at `index` failed: later calls start at the next one.
  void Failover(size_t index);
  absl::Status AddMetadata(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& endpoints_text() const { return endpoints_text_; }

 private:
  explicit EtcdClient(EtcdOptions options) : options_(std::move(options)) {}
  // Runs `fn` on endpoints in turn until it succeeds, fails for a reason other than
  // reachability, or `budget` is spent.
  absl::Status Call(const char* what, Duration budget,
                    const std::function<grpc::Status(grpc::ClientContext*,
                                                     const std::shared_ptr<grpc::Channel>&)>& fn)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Authenticate(const std::shared_ptr<grpc::Channel>& channel, TimePoint deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  const EtcdOptions options_;
  std::string endpoints_text_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::atomic<size_t> current_{0};
  std::atomic<bool> aborted_{false};
  absl::Mutex mu_;  // never held across a call to etcd
  std::string token_ ABSL_GUARDED_BY(mu_);
};

// Maps a failed gRPC call to an absl::Status with etcd's message and the call's name.
absl::Status EtcdStatus(const char* what, const grpc::Status& status);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_ETCD_ETCD_CLIENT_H_
