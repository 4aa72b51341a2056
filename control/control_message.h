// The in-process recovery control channel (docs/design.md, "In-process recovery"): the wire
// format shared by the agent (launcher/control/) and the workers that speak it (ddp-train,
// control/control_client.h; the Python module python/ddprun_inprocess.py).
//
// One Unix stream socket per agent, its path in the worker's DDPRUN_CONTROL_SOCKET. Every
// message is one JSON object on one line ('\n'-terminated, at most kMaxControlLineBytes),
// with a "type". Unknown fields are ignored, so either side may add fields without a new
// version.
//
//   worker -> agent  hello  {"type":"hello","version":1,"local_rank":L,"pid":P,"advice":true}
//                    ready  {"type":"ready","round":R,"step":S}
//   agent -> worker  round  {"type":"round","round":R,"rank":..,"world_size":..,
//                            "local_rank":..,"local_world_size":..,"group_rank":..,
//                            "group_world_size":..,"master_addr":"..","master_port":..,
//                            "restart_count":..,"store_prefix":"..","deadline_ms":..}
//                    abort  {"type":"abort","round":R,"reason":".."}
//                    advice {"type":"advice","checkpoint_interval_s":S}  (only to a worker
//                            whose hello said "advice":true: an older one knows no such type)
//
// Pure: encoding and validation, no sockets.
#ifndef DDPRUN_CONTROL_CONTROL_MESSAGE_H_
#define DDPRUN_CONTROL_CONTROL_MESSAGE_H_

#include <cstdint>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/env_variables.h"

namespace ddprun::control {

inline constexpr int kControlProtocolVersion = 1;
// A line longer than this is garbage: the reader drops the connection (agent) or fails (worker).
inline constexpr size_t kMaxControlLineBytes = 4096;
// The worker's environment variable naming the agent's socket (set only with
// --restart-mode=in-process).
inline constexpr const char* kControlSocketEnv = kControlSocketVariable.name;

// The worker introduces itself; from then on it speaks the protocol, and a failure elsewhere
// no longer stops it.
struct HelloMessage {
  int version = kControlProtocolVersion;
  int local_rank = -1;
  int64_t pid = 0;
  bool advice = false;  // the worker takes advice messages
};

// The worker has formed round `round`'s process group and holds the state of `step` (the
// global step of its last completed optimizer step, synchronised from the newest rank; -1: no
// state yet).
struct ReadyMessage {
  int64_t round = 0;
  int64_t step = -1;
};

// Join round `round` with these coordinates. Sent in reply to hello (the worker's current
// round) and whenever a new round forms while the worker lives.
struct RoundMessage {
  int64_t round = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  // Every store key of the round goes under it (never shared with another round).
  std::string store_prefix;
  // Time the worker has from this message to its ready; after it, ddprun kills the worker.
  int64_t deadline_ms = 0;
};

// Round `round` is over: abandon the step in progress and the process group, keep the state of
// the last completed step, wait for the next round message.
struct AbortMessage {
  int64_t round = 0;
  std::string reason;
};

// The run's checkpoint advice changed (issue 41): seconds of training between checkpoints that
// maximise effective training time (DDPRUN_CHECKPOINT_INTERVAL_ADVICE gave the one of the
// worker's start).
struct AdviceMessage {
  double checkpoint_interval_s = 0;
};

using ControlMessage =
    std::variant<HelloMessage, ReadyMessage, RoundMessage, AbortMessage, AdviceMessage>;

// One line, without the '\n'.
std::string EncodeControlMessage(const ControlMessage& message);

// kInvalidArgument naming what is wrong (not JSON, not an object, an unknown type, a field of
// the wrong type or out of range, a line over kMaxControlLineBytes, a NUL byte anywhere).
absl::StatusOr<ControlMessage> ParseControlMessage(absl::string_view line);

// The store prefix of a round: "/ddprun/round_<round>/".
std::string RoundStorePrefix(int64_t round);

}  // namespace ddprun::control

#endif  // DDPRUN_CONTROL_CONTROL_MESSAGE_H_
