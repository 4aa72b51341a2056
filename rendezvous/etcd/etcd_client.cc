#include "rendezvous/etcd/etcd_client.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "rendezvous/grpc/channel_args.h"

namespace ddprun::rendezvous {
namespace {

// Keepalive pings sooner than the rendezvous client's: a member cut off is left for the next
// one within an etcd call's deadline.
constexpr std::chrono::milliseconds kEtcdKeepaliveTime{5000};
constexpr std::chrono::milliseconds kEtcdKeepaliveTimeout{2000};

bool Retriable(grpc::StatusCode code) {
  // UNAVAILABLE: the member is down, or has no leader / lost it ("leader changed").
  // DEADLINE_EXCEEDED: the member did not answer in time (partitioned, or electing).
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

bool TokenExpired(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
         s.error_message().find("token") != std::string::npos;
}

TimePoint Now() { return std::chrono::steady_clock::now(); }

// gRPC deadlines are system_clock time points; ours are steady.
std::chrono::system_clock::time_point GrpcDeadline(TimePoint deadline) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - Now());
}

}  // namespace

std::string EtcdPrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::Status EtcdStatus(const char* what, const grpc::Status& s) {
  const std::string msg = absl::StrCat("etcd ", what, ": ", s.error_message());
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), msg);
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  auto creds = MakeChannelCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  std::unique_ptr<EtcdClient> client(new EtcdClient(std::move(options)));
  client->endpoints_text_ = absl::StrJoin(client->options_.endpoints, ",");
  for (const std::string& endpoint : client->options_.endpoints) {
    // A member that comes back is found quickly; a dead one fails a call at once (no
    // wait-for-ready), so the call moves to the next member.
    ChannelTuning tuning;
    tuning.keepalive_time = kEtcdKeepaliveTime;
    tuning.keepalive_timeout = kEtcdKeepaliveTimeout;
    client->channels_.push_back(
        grpc::CreateCustomChannel(endpoint, *creds, MakeChannelArguments(tuning)));
  }
  return client;
}

std::shared_ptr<grpc::Channel> EtcdClient::CurrentChannel(size_t* index) {
  *index = current_.load() % channels_.size();
  return channels_[*index];
}

void EtcdClient::Failover(size_t index) {
  size_t expected = index;
  current_.compare_exchange_strong(expected, (index + 1) % channels_.size());
}

absl::Status EtcdClient::AddMetadata(grpc::ClientContext* context) {
  // Watches on a member without a leader are cancelled rather than left silent.
  context->AddMetadata("hasleader", "true");
  absl::MutexLock lock(&mu_);
  if (!token_.empty()) context->AddMetadata("token", token_);
  return absl::OkStatus();
}

absl::Status EtcdClient::Authenticate(const std::shared_ptr<grpc::Channel>& channel,
                                      TimePoint deadline) {
  auto stub = etcdserverpb::Auth::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(
      GrpcDeadline(std::min<TimePoint>(deadline, Now() + options_.attempt_timeout)));
  etcdserverpb::AuthenticateRequest request;
  request.set_name(options_.user);
  request.set_password(options_.password);
  etcdserverpb::AuthenticateResponse response;
  grpc::Status s = stub->Authenticate(&context, request, &response);
  if (!s.ok()) return EtcdStatus("authenticate", s);
  absl::MutexLock lock(&mu_);
  token_ = response.token();
  return absl::OkStatus();
}

absl::Status EtcdClient::Call(
    const char* what, Duration budget,
    const std::function<grpc::Status(grpc::ClientContext*, const std::shared_ptr<grpc::Channel>&)>&
        fn) {
  const TimePoint deadline = Now() + budget;
  grpc::Status last;
  bool authenticated_once = false;
  do {
    if (aborted_.load()) return absl::CancelledError(absl::StrCat("etcd ", what, ": aborted"));
    size_t index = 0;
    std::shared_ptr<grpc::Channel> channel = CurrentChannel(&index);
    // A member that is down (its connection refused or lost) is passed over while another may
    // answer: waiting out a whole attempt on it made calls right after a member died take
    // longer than the lease, and agents lost their leases to a cluster that still had a quorum.
    if (channels_.size() > 1 && !channel->WaitForConnected(GrpcDeadline(std::min<TimePoint>(
                                    deadline, Now() + options_.connect_timeout)))) {
      last = grpc::Status(grpc::StatusCode::UNAVAILABLE, "no connection");
      Failover(index);
      continue;
    }
    bool need_auth = false;
    if (!options_.user.empty()) {
      absl::MutexLock lock(&mu_);
      need_auth = token_.empty();
    }
    if (need_auth) {
      absl::Status auth = Authenticate(channel, deadline);
      if (!auth.ok()) {
        if (!Retriable(static_cast<grpc::StatusCode>(auth.code()))) return auth;
        last =
            grpc::Status(static_cast<grpc::StatusCode>(auth.code()), std::string(auth.message()));
        Failover(index);
        continue;
      }
    }
    grpc::ClientContext context;
    context.set_deadline(
        GrpcDeadline(std::min<TimePoint>(deadline, Now() + options_.attempt_timeout)));
    AddMetadata(&context).IgnoreError();
    // Wait (within the attempt's deadline) for the channel to connect instead of failing at
    // once: fail-fast attempts against a member that was not up yet kept cancelling the
    // channel's own connection attempts, and the agent never joined after etcd came up.
    context.set_wait_for_ready(true);
    last = fn(&context, channel);
    if (last.ok()) return absl::OkStatus();
    if (!options_.user.empty() && TokenExpired(last) && !authenticated_once) {
      authenticated_once = true;
      absl::MutexLock lock(&mu_);
      token_.clear();
      continue;
    }
    if (!Retriable(last.error_code())) return EtcdStatus(what, last);
    Failover(index);
    // A short pause between rounds over all endpoints, so that a cluster electing a leader is
    // not hammered; bounded by the budget.
    if (index + 1 == channels_.size()) {
      std::this_thread::sleep_for(std::min<Duration>(std::chrono::milliseconds(50),
                                                     std::max<Duration>(deadline - Now(), {})));
    }
  } while (Now() < deadline);
  return absl::UnavailableError(absl::StrCat("etcd at ", endpoints_text_, " unreachable (", what,
                                             "): ", last.error_message()));
}

#define DDPRUN_ETCD_UNARY(Service, Method, Req, Resp, what)                                        \
  absl::StatusOr<etcdserverpb::Resp> EtcdClient::Method(const etcdserverpb::Req& r,                \
                                                        Duration budget) {                         \
    etcdserverpb::Resp response;                                                                   \
    absl::Status s =                                                                               \
        Call(what, budget, [&](grpc::ClientContext* c, const std::shared_ptr<grpc::Channel>& ch) { \
          auto stub = etcdserverpb::Service::NewStub(ch);                                          \
          return stub->Method(c, r, &response);                                                    \
        });                                                                                        \
    if (!s.ok()) return s;                                                                         \
    return response;                                                                               \
  }

DDPRUN_ETCD_UNARY(KV, Range, RangeRequest, RangeResponse, "range")
DDPRUN_ETCD_UNARY(KV, Put, PutRequest, PutResponse, "put")
DDPRUN_ETCD_UNARY(KV, DeleteRange, DeleteRangeRequest, DeleteRangeResponse, "delete")
DDPRUN_ETCD_UNARY(KV, Txn, TxnRequest, TxnResponse, "txn")
#undef DDPRUN_ETCD_UNARY

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_seconds,
                                                                        Duration budget) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  absl::Status s = Call("lease grant", budget,
                        [&](grpc::ClientContext* c, const std::shared_ptr<grpc::Channel>& ch) {
                          auto stub = etcdserverpb::Lease::NewStub(ch);
                          return stub->LeaseGrant(c, request, &response);
                        });
  if (!s.ok()) return s;
  if (!response.error().empty())
    return absl::InternalError("etcd lease grant: " + response.error());
  return response;
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease, Duration budget) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return Call("lease revoke", budget,
              [&](grpc::ClientContext* c, const std::shared_ptr<grpc::Channel>& ch) {
                auto stub = etcdserverpb::Lease::NewStub(ch);
                return stub->LeaseRevoke(c, request, &response);
              });
}

absl::StatusOr<int64_t> EtcdClient::KeepAliveOnce(int64_t lease, Duration budget) {
  int64_t ttl = 0;
  absl::Status s = Call("lease keepalive", budget,
                        [&](grpc::ClientContext* c, const std::shared_ptr<grpc::Channel>& ch) {
                          auto stub = etcdserverpb::Lease::NewStub(ch);
                          auto stream = stub->LeaseKeepAlive(c);
                          etcdserverpb::LeaseKeepAliveRequest request;
                          request.set_id(lease);
                          etcdserverpb::LeaseKeepAliveResponse response;
                          if (stream->Write(request) && stream->Read(&response)) {
                            ttl = response.ttl();
                            stream->WritesDone();
                            c->TryCancel();  // one round trip is all we wanted
                            stream->Finish().IgnoreError();
                            return grpc::Status::OK;
                          }
                          return stream->Finish();
                        });
  if (!s.ok()) return s;
  if (ttl <= 0) return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " is gone"));
  return ttl;
}

}  // namespace ddprun::rendezvous
