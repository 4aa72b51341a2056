#include "control/control_message.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ddprun::control {
namespace {

using Json = nlohmann::json;

// Field `name` of `object` as an integer in [lo, hi]; a missing field is an error.
absl::StatusOr<int64_t> IntField(const Json& object, const char* name, int64_t lo, int64_t hi) {
  auto it = object.find(name);
  if (it == object.end()) return absl::InvalidArgumentError(absl::StrCat("no \"", name, "\""));
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\" is not an integer"));
  }
  // An unsigned JSON integer over INT64_MAX would wrap (2^64-1 read as -1, a valid step).
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\"=", it->get<uint64_t>(), " is outside [", lo, ", ", hi, "]"));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", name, "\"=", v, " is outside [", lo, ", ", hi, "]"));
  }
  return v;
}

absl::StatusOr<std::string> StringField(const Json& object, const char* name, size_t max_len) {
  auto it = object.find(name);
  if (it == object.end()) return absl::InvalidArgumentError(absl::StrCat("no \"", name, "\""));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\" is not a string"));
  }
  std::string v = it->get<std::string>();
  if (v.size() > max_len) {
    return absl::InvalidArgumentError(absl::StrCat("\"", name, "\" is longer than ", max_len));
  }
  return v;
}

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMaxRound = int64_t{1} << 53;  // exact in every JSON reader (doubles)

absl::StatusOr<ControlMessage> FromJson(const std::string& type, const Json& j) {
  if (type == "hello") {
    HelloMessage m;
    int64_t version, local_rank, pid;
    DDPRUN_ASSIGN_OR_RETURN(version, IntField(j, "version", 1, kMaxInt));
    DDPRUN_ASSIGN_OR_RETURN(local_rank, IntField(j, "local_rank", 0, kMaxInt));
    DDPRUN_ASSIGN_OR_RETURN(pid, IntField(j, "pid", 1, kMaxInt));
    m.version = static_cast<int>(version);
    m.local_rank = static_cast<int>(local_rank);
    m.pid = pid;
    if (auto advice = j.find("advice"); advice != j.end() && advice->is_boolean()) {
      m.advice = advice->get<bool>();
    }
    return m;
  }
  if (type == "ready") {
    ReadyMessage m;
    DDPRUN_ASSIGN_OR_RETURN(m.round, IntField(j, "round", 0, kMaxRound));
    DDPRUN_ASSIGN_OR_RETURN(m.step, IntField(j, "step", -1, kMaxRound));
    return m;
  }
  if (type == "round") {
    RoundMessage m;
    int64_t rank, world, lr, lws, gr, gws, port, restarts;
    DDPRUN_ASSIGN_OR_RETURN(m.round, IntField(j, "round", 0, kMaxRound));
    DDPRUN_ASSIGN_OR_RETURN(world, IntField(j, "world_size", 1, kMaxInt));
    DDPRUN_ASSIGN_OR_RETURN(rank, IntField(j, "rank", 0, world - 1));
    DDPRUN_ASSIGN_OR_RETURN(lws, IntField(j, "local_world_size", 1, kMaxInt));
    DDPRUN_ASSIGN_OR_RETURN(lr, IntField(j, "local_rank", 0, lws - 1));
    DDPRUN_ASSIGN_OR_RETURN(gws, IntField(j, "group_world_size", 1, kMaxInt));
    DDPRUN_ASSIGN_OR_RETURN(gr, IntField(j, "group_rank", 0, gws - 1));
    DDPRUN_ASSIGN_OR_RETURN(port, IntField(j, "master_port", 0, 65535));
    DDPRUN_ASSIGN_OR_RETURN(restarts, IntField(j, "restart_count", 0, kMaxInt));
    DDPRUN_ASSIGN_OR_RETURN(m.master_addr, StringField(j, "master_addr", 256));
    DDPRUN_ASSIGN_OR_RETURN(m.store_prefix, StringField(j, "store_prefix", 256));
    DDPRUN_ASSIGN_OR_RETURN(m.deadline_ms, IntField(j, "deadline_ms", 0, kMaxRound));
    m.rank = static_cast<int>(rank);
    m.world_size = static_cast<int>(world);
    m.local_rank = static_cast<int>(lr);
    m.local_world_size = static_cast<int>(lws);
    m.group_rank = static_cast<int>(gr);
    m.group_world_size = static_cast<int>(gws);
    m.master_port = static_cast<int>(port);
    m.restart_count = static_cast<int>(restarts);
    return m;
  }
  if (type == "abort") {
    AbortMessage m;
    DDPRUN_ASSIGN_OR_RETURN(m.round, IntField(j, "round", 0, kMaxRound));
    DDPRUN_ASSIGN_OR_RETURN(m.reason, StringField(j, "reason", kMaxControlLineBytes));
    return m;
  }
  if (type == "advice") {
    auto s = j.find("checkpoint_interval_s");
    if (s == j.end() || !s->is_number() || !(s->get<double>() > 0) || s->get<double>() > 1e9) {
      return absl::InvalidArgumentError("advice: no valid \"checkpoint_interval_s\"");
    }
    return AdviceMessage{s->get<double>()};
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown message type \"", type, "\""));
}

}  // namespace

std::string EncodeControlMessage(const ControlMessage& message) {
  Json j = std::visit(
      [](const auto& m) -> Json {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, HelloMessage>) {
          return {{"type", "hello"},
                  {"version", m.version},
                  {"local_rank", m.local_rank},
                  {"pid", m.pid},
                  {"advice", m.advice}};
        } else if constexpr (std::is_same_v<T, ReadyMessage>) {
          return {{"type", "ready"}, {"round", m.round}, {"step", m.step}};
        } else if constexpr (std::is_same_v<T, RoundMessage>) {
          return {{"type", "round"},
                  {"round", m.round},
                  {"rank", m.rank},
                  {"world_size", m.world_size},
                  {"local_rank", m.local_rank},
                  {"local_world_size", m.local_world_size},
                  {"group_rank", m.group_rank},
                  {"group_world_size", m.group_world_size},
                  {"master_addr", m.master_addr},
                  {"master_port", m.master_port},
                  {"restart_count", m.restart_count},
                  {"store_prefix", m.store_prefix},
                  {"deadline_ms", m.deadline_ms}};
        } else if constexpr (std::is_same_v<T, AdviceMessage>) {
          return {{"type", "advice"}, {"checkpoint_interval_s", m.checkpoint_interval_s}};
        } else {
          return {{"type", "abort"}, {"round", m.round}, {"reason", m.reason}};
        }
      },
      message);
  // Invalid UTF-8 (a reason quoting a worker's bytes) is replaced, never thrown.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::StatusOr<ControlMessage> ParseControlMessage(absl::string_view line) {
  if (line.size() > kMaxControlLineBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a line of ", line.size(), " bytes (at most ", kMaxControlLineBytes, ")"));
  }
  // JSON allows no raw control character outside a string and only escaped ones inside, but a
  // parser reading up to a NUL (C strings) would see a different message than this one.
  if (const size_t nul = line.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("a NUL byte at offset ", nul));
  }
  Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) {
    return absl::InvalidArgumentError("no \"type\" string");
  }
  return FromJson(type->get<std::string>(), j);
}

std::string RoundStorePrefix(int64_t round) { return absl::StrCat("/ddprun/round_", round, "/"); }

}  // namespace ddprun::control
