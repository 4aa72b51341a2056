// The agent's side of the in-process recovery control channel (control/control_message.h,
// docs/design.md §6b): a Unix stream socket in the agent's private directory that the workers
// connect to. A connection becomes a local rank's once its hello is accepted (the listener
// checks that the connecting process is that rank's worker); from then on the agent can send
// it round and abort messages, and its ready messages reach the listener.
//
// A hostile or broken worker cannot stall the agent nor flood its log: reads are bounded per
// wake-up, a line over kMaxControlLineBytes, one that is not a valid message (a NUL byte
// included) or more than kMessageBurst messages at over kMessagesPerSecond close the connection
// (one log line naming the local rank), a connection that says nothing for kHelloTimeout is
// closed, and sends never block (a worker that does not read its channel until the socket buffer
// is full loses the connection). Connections waiting for their hello are limited per worker
// process tree (Listener::WorkerOf, from the peer's SO_PEERCRED pid at accept), so neither a
// worker's children nor a process outside the job can keep another worker from connecting;
// refusals are logged once per owner, then counted.
//
// Single-threaded: every method runs on the agent's EventLoop thread.
#ifndef DDPRUN_LAUNCHER_CONTROL_CONTROL_SERVER_H_
#define DDPRUN_LAUNCHER_CONTROL_CONTROL_SERVER_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/event_loop.h"
#include "control/control_message.h"

namespace ddprun::launcher {

class ControlServer {
 public:
  static constexpr std::chrono::seconds kHelloTimeout{10};
  // Connections without a hello at once, per worker process tree (and for every process that
  // is in none, together).
  static constexpr int kMaxPendingPerWorker = 8;
  static constexpr int kMaxPendingOutsideWorkers = 16;
  // A worker sends a hello, then a ready per round: a few messages a minute.
  static constexpr int kMessagesPerSecond = 20;
  static constexpr int kMessageBurst = 40;

  class Listener {
   public:
    virtual ~Listener() = default;
    // The pid of the worker whose process tree holds `peer_pid` (the worker or a descendant);
    // 0 when none. Asked once per connection, at accept.
    virtual pid_t WorkerOf(pid_t peer_pid) = 0;
    // A hello from the process `peer_pid` (SO_PEERCRED). Returns "" to accept it as
    // `hello.local_rank`'s channel, else why not (logged; the connection is closed).
    virtual std::string CheckHello(const control::HelloMessage& hello, pid_t peer_pid) = 0;
    // An accepted hello: the local rank's worker speaks the protocol.
    virtual void OnHello(int local_rank) = 0;
    virtual void OnReady(int local_rank, const control::ReadyMessage& ready) = 0;
    // A local rank's accepted channel was closed because of what came over it (garbage, an
    // oversized line, a second hello) or a failed send: the worker can no longer be reached.
    // Not called when the worker closed it, nor for Disconnect().
    virtual void OnChannelBroken(int local_rank, const std::string& why) {}
  };

  // Listens at `path` (a Unix socket, created with mode 0600; anything there is replaced). A
  // connection without a hello is closed after `hello_timeout` (shorter in tests).
  static absl::StatusOr<std::unique_ptr<ControlServer>> Listen(
      EventLoop* loop, const std::string& path, Listener* listener,
      std::chrono::milliseconds hello_timeout = kHelloTimeout);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& path() const { return path_; }

  // Sends `message` to local rank `local_rank`'s channel. False when it has none (never said
  // hello, closed, or the send failed: then the connection is closed too).
  bool Send(int local_rank, const control::ControlMessage& message);
  // Closes the local rank's channel (its worker is gone or replaced).
  void Disconnect(int local_rank);
  bool Connected(int local_rank) const { return by_rank_.count(local_rank) > 0; }

 private:
  struct Connection {
    int fd = -1;
    int local_rank = -1;  // -1 until its hello is accepted
    pid_t owner = 0;      // Listener::WorkerOf the peer at accept
    std::string buffer;
    EventLoop::TimerId hello_timer = 0;
    // Token bucket of messages (kMessagesPerSecond, kMessageBurst).
    double tokens = kMessageBurst;
    std::chrono::steady_clock::time_point refilled;
  };

  ControlServer(EventLoop* loop, std::string path, int listen_fd, Listener* listener,
                std::chrono::milliseconds hello_timeout);
  void Accept();
  // Whether `owner` may have another connection waiting for its hello; logs the first refusal
  // per owner and counts the rest.
  bool MayWaitForHello(pid_t owner);
  // Takes one message from `c`'s bucket; false when it is empty (a flood).
  bool TakeToken(Connection* c);
  void Read(Connection* c);
  // One complete line of `c`; false when the connection was closed because of it.
  bool HandleLine(Connection* c, const std::string& line);
  void Close(Connection* c, const std::string& why);
  std::string Who(const Connection* c) const;

  EventLoop* loop_;
  const std::string path_;
  const int listen_fd_;
  Listener* listener_;
  const std::chrono::milliseconds hello_timeout_;
  std::map<int, std::unique_ptr<Connection>> connections_;  // by fd
  std::map<int, Connection*> by_rank_;
  // Bounded: one entry per worker process the agent started, and one (0) for the rest.
  std::map<pid_t, int64_t> refused_;              // refused at accept (the limit was reached)
  std::map<pid_t, int64_t> unidentified_closed_;  // closed before their hello, with a reason
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONTROL_CONTROL_SERVER_H_
