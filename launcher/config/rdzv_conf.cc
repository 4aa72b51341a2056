#include "launcher/config/rdzv_conf.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace ddprun::launcher {
namespace {

absl::StatusOr<std::chrono::milliseconds> Seconds(const std::string& key,
                                                  const std::string& value) {
  return ParseSeconds(absl::StrCat("--rdzv-conf ", key), value);
}

// torchrun's names for ddprun's TLS keys: its etcd backend's and its etcd-v2 backend's.
constexpr std::pair<const char*, const char*> kTorchTlsKeys[] = {
    {"cacert", "tls_ca"},     {"ca_cert", "tls_ca"}, {"cert", "tls_cert"},
    {"ssl_cert", "tls_cert"}, {"key", "tls_key"},    {"ssl_cert_key", "tls_key"},
};

// `conf` with torchrun's TLS keys renamed to ddprun's. Two names for one setting must agree.
absl::StatusOr<std::map<std::string, std::string>> WithDdprunKeys(
    const std::map<std::string, std::string>& conf) {
  std::map<std::string, std::string> out;
  std::map<std::string, std::string> named_by;  // ddprun key -> the key the user wrote
  for (const auto& [key, value] : conf) {
    std::string name = key;
    for (const auto& [torch_name, ddprun_name] : kTorchTlsKeys) {
      if (key == torch_name) name = ddprun_name;
    }
    auto [it, inserted] = out.emplace(name, value);
    if (inserted) {
      named_by[name] = key;
    } else if (it->second != value) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv-conf ", named_by[name], "=",
                                                     it->second, " and ", key, "=", value,
                                                     ": two values for one setting (", name, ")"));
    }
  }
  return out;
}

absl::StatusOr<RdzvProtocol> ParseProtocol(const std::string& value) {
  // As torchrun's etcd-v2 backend reads it: case and surrounding blanks do not matter.
  const std::string p = absl::AsciiStrToLower(absl::StripAsciiWhitespace(value));
  if (p == "http") return RdzvProtocol::kHttp;
  if (p == "https") return RdzvProtocol::kHttps;
  return absl::InvalidArgumentError(
      absl::StrCat("--rdzv-conf protocol=", value, ": must be http or https"));
}

absl::StatusOr<StaticCoordination> ParseStaticCoordination(const std::string& value) {
  if (value == "rendezvous") return StaticCoordination::kRendezvous;
  if (value == "none") return StaticCoordination::kNone;
  return absl::InvalidArgumentError(
      absl::StrCat("--rdzv-conf static_coordination=", value, ": must be rendezvous or none"));
}

// Whole milliseconds in [min, max] (the liveness keys).
absl::StatusOr<std::chrono::milliseconds> Millis(const std::string& key, const std::string& value,
                                                 int64_t min, int64_t max) {
  DDPRUN_ASSIGN_OR_RETURN(int64_t n, ParseInt(absl::StrCat("--rdzv-conf ", key), value, min, max));
  return std::chrono::milliseconds(n);
}

absl::StatusOr<rendezvous::LivenessMode> ParseLivenessMode(const std::string& value) {
  if (value == "on") return rendezvous::LivenessMode::kOn;
  if (value == "auto") return rendezvous::LivenessMode::kAuto;
  if (value == "off") return rendezvous::LivenessMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("--rdzv-conf liveness=", value, ": must be off, auto or on"));
}

absl::StatusOr<double> ParsePhi(const std::string& value) {
  double phi = 0;
  if (!absl::SimpleAtod(value, &phi) || !(phi >= 1 && phi <= 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-conf liveness_phi=", value, ": must be a number from 1 to 30"));
  }
  return phi;
}

// Sets the liveness detector's key `key` on `c`; false when `key` is none of them.
absl::StatusOr<bool> ParseLivenessKey(const std::string& key, const std::string& value,
                                      RdzvConf* c) {
  if (key == "liveness") {
    DDPRUN_ASSIGN_OR_RETURN(c->liveness, ParseLivenessMode(value));
  } else if (key == "liveness_interval_ms") {
    DDPRUN_ASSIGN_OR_RETURN(c->timeouts.liveness.interval, Millis(key, value, 1, 10000));
  } else if (key == "liveness_phi") {
    DDPRUN_ASSIGN_OR_RETURN(c->timeouts.liveness.phi, ParsePhi(value));
  } else if (key == "liveness_pause_ms") {
    DDPRUN_ASSIGN_OR_RETURN(c->timeouts.liveness.pause, Millis(key, value, 0, 60000));
  } else if (key == "liveness_min_sd_ms") {
    DDPRUN_ASSIGN_OR_RETURN(c->timeouts.liveness.min_sd, Millis(key, value, 1, 60000));
  } else if (key == "liveness_max_rate") {
    DDPRUN_ASSIGN_OR_RETURN(c->timeouts.liveness.max_rate,
                            ParseInt("--rdzv-conf liveness_max_rate", value, 100, 10000000));
  } else if (key == "liveness_observers") {
    DDPRUN_ASSIGN_OR_RETURN(int64_t n, ParseInt("--rdzv-conf liveness_observers", value, 1, 64));
    c->timeouts.liveness.observers = static_cast<int>(n);
  } else {
    return false;
  }
  return true;
}

// mtbf=: the checkpoint advice's prior, a positive number of seconds.
absl::StatusOr<std::chrono::milliseconds> Mtbf(const std::string& value) {
  DDPRUN_ASSIGN_OR_RETURN(std::chrono::milliseconds mtbf, Seconds("mtbf", value));
  if (mtbf.count() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-conf mtbf=", value, ": must be more than 0 seconds"));
  }
  return mtbf;
}

// requalify_interval=: seconds between a set-aside node's tries of the preflight.
absl::StatusOr<std::chrono::milliseconds> RequalifyInterval(const std::string& value) {
  DDPRUN_ASSIGN_OR_RETURN(std::chrono::milliseconds interval, Seconds("requalify_interval", value));
  if (!rendezvous::ValidRequalifyInterval(interval)) {
    return absl::InvalidArgumentError(absl::StrCat("--rdzv-conf requalify_interval=", value,
                                                   ": must be from 1 to 86400 seconds"));
  }
  return interval;
}

// Sets the key `key` of the judges of nodes (issue 41) on `c`: the checkpoint advice's prior,
// the requalification's pace; false when `key` is none of them.
absl::StatusOr<bool> ParseJudgeKey(const std::string& key, const std::string& value, RdzvConf* c) {
  if (key == "mtbf") {
    DDPRUN_ASSIGN_OR_RETURN(c->timeouts.mtbf, Mtbf(value));
  } else if (key == "requalify_interval") {
    DDPRUN_ASSIGN_OR_RETURN(c->timeouts.preflight.requalify_interval, RequalifyInterval(value));
  } else {
    return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<RdzvConf> ParseRdzvConf(const std::map<std::string, std::string>& given) {
  RdzvConf c;
  c.given = given;
  DDPRUN_ASSIGN_OR_RETURN(const auto conf, WithDdprunKeys(given));
  for (const auto& [key, value] : conf) {
    if (key == "join_timeout" || key == "timeout") {
      DDPRUN_ASSIGN_OR_RETURN(c.timeouts.join_timeout, Seconds(key, value));
    } else if (key == "last_call_timeout") {
      DDPRUN_ASSIGN_OR_RETURN(c.timeouts.last_call_timeout, Seconds(key, value));
    } else if (key == "failure_last_call_timeout") {
      DDPRUN_ASSIGN_OR_RETURN(c.timeouts.failure_last_call_timeout, Seconds(key, value));
    } else if (key == "keep_alive_interval") {
      DDPRUN_ASSIGN_OR_RETURN(c.timeouts.keep_alive_interval, Seconds(key, value));
      if (c.timeouts.keep_alive_interval.count() == 0) {
        return absl::InvalidArgumentError(absl::StrCat("--rdzv-conf keep_alive_interval=", value,
                                                       ": must be at least 0.001 seconds"));
      }
    } else if (key == "keep_alive_max_attempt") {
      DDPRUN_ASSIGN_OR_RETURN(int64_t n,
                              ParseInt("--rdzv-conf keep_alive_max_attempt", value, 1, 1000));
      c.timeouts.keep_alive_max_attempt = static_cast<int>(n);
    } else if (key == "read_timeout") {
      DDPRUN_ASSIGN_OR_RETURN(c.read_timeout, Seconds(key, value));
    } else if (key == "close_timeout") {
      DDPRUN_ASSIGN_OR_RETURN(std::chrono::milliseconds close, Seconds(key, value));
      c.close_timeout = close;
    } else if (key == "is_host") {
      DDPRUN_ASSIGN_OR_RETURN(c.is_host, ParseBool("--rdzv-conf is_host", value));
    } else if (key == "token_file") {
      c.token_file = value;
    } else if (key == "tls_cert") {
      c.tls_cert = value;
    } else if (key == "tls_key") {
      c.tls_key = value;
    } else if (key == "tls_ca") {
      c.tls_ca = value;
    } else if (key == "tls_client_ca") {
      c.tls_client_ca = value;
    } else if (key == "protocol") {
      DDPRUN_ASSIGN_OR_RETURN(c.protocol, ParseProtocol(value));
    } else if (key == "tls_server_name") {
      c.tls_server_name = value;
    } else if (key == "etcd_prefix") {
      c.etcd_prefix = value;
    } else if (key == "etcd_user") {
      c.etcd_user = value;
    } else if (key == "etcd_password_file") {
      c.etcd_password_file = value;
    } else if (key == "http_port") {
      DDPRUN_ASSIGN_OR_RETURN(int64_t port, ParseInt("--rdzv-conf http_port", value, 0, 65535));
      c.http_port = static_cast<int>(port);
    } else if (key == "http_host") {
      c.http_host = value;
    } else if (key == "static_coordination") {
      DDPRUN_ASSIGN_OR_RETURN(c.static_coordination, ParseStaticCoordination(value));
    } else if (key == "static_port") {
      DDPRUN_ASSIGN_OR_RETURN(int64_t port, ParseInt("--rdzv-conf static_port", value, 1, 65535));
      c.static_port = static_cast<int>(port);
    } else if (absl::StartsWith(key, "liveness")) {
      DDPRUN_ASSIGN_OR_RETURN(const bool known, ParseLivenessKey(key, value, &c));
      if (!known) c.unknown_keys.push_back(key);
    } else if (key == "store_type" || key == "use_libuv") {
      // torch 2.x store options; meaningless without an agent store, accepted and ignored.
    } else if (key == "heartbeat_timeout") {
      // torch 2.x: how long one keep-alive write to its store may take. ddprun's keep-alives
      // are messages on a stream that stays open; the lease (keep_alive_interval x
      // keep_alive_max_attempt) bounds them. Checked, then unused.
      DDPRUN_RETURN_IF_ERROR(Seconds(key, value).status());
    } else {
      DDPRUN_ASSIGN_OR_RETURN(const bool known, ParseJudgeKey(key, value, &c));
      // As torchrun: a key this backend does not read is no error (job scripts carry keys for
      // other backends and versions); the caller warns once, naming it (UnknownKeyWarning).
      if (!known) c.unknown_keys.push_back(key);
    }
  }
  if (c.protocol == RdzvProtocol::kHttp) {
    for (const auto& [key, file] : {std::pair<const char*, const std::string&>{"tls_ca", c.tls_ca},
                                    {"tls_cert", c.tls_cert},
                                    {"tls_key", c.tls_key},
                                    {"tls_client_ca", c.tls_client_ca}}) {
      if (!file.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--rdzv-conf protocol=http and ", key, "=",
                                                       file, ": TLS files need protocol=https"));
      }
    }
  }
  // A node is lost after keep_alive_interval x keep_alive_max_attempt without a message: that
  // lease must be a sane duration too.
  if (c.timeouts.lease() > std::chrono::seconds(kMaxSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rdzv-conf keep_alive_interval=",
                     std::chrono::duration<double>(c.timeouts.keep_alive_interval).count(),
                     ", keep_alive_max_attempt=", c.timeouts.keep_alive_max_attempt,
                     ": the lease (their product) must be at most ", kMaxSeconds, " seconds"));
  }
  // Checked whether on or off: a bad key is a typo to report now, not when someone turns it on.
  DDPRUN_RETURN_IF_ERROR(rendezvous::ValidateLivenessSettings(c.timeouts.liveness));
  return c;
}

std::string UnknownKeyWarning(const std::string& key, const std::string& value) {
  std::string hint;
  if (key.find_first_of("'\"") != std::string::npos) {
    hint = " (a quote is part of the key: was the value quoted twice?)";
  }
  return absl::StrCat(
      "--rdzv-conf ", key, "=", value, ": unknown key, ignored", hint,
      "; ddprun reads join_timeout, last_call_timeout, failure_last_call_timeout, "
      "close_timeout, read_timeout, keep_alive_interval, keep_alive_max_attempt, is_host, "
      "token_file, tls_cert, tls_key, tls_ca, tls_client_ca, tls_server_name, protocol, "
      "etcd_prefix, etcd_user, etcd_password_file, http_port, http_host, static_coordination, "
      "static_port, liveness, liveness_interval_ms, liveness_phi, liveness_pause_ms, "
      "liveness_min_sd_ms, liveness_max_rate, liveness_observers, mtbf, requalify_interval, and "
      "torchrun's cacert, "
      "ca_cert, "
      "cert, ssl_cert, "
      "key, ssl_cert_key, "
      "heartbeat_timeout, store_type, use_libuv");
}

}  // namespace ddprun::launcher
