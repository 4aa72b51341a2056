#include "common/strings.h"

#include <cmath>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ddprun {

absl::StatusOr<int64_t> ParseInt(absl::string_view what, absl::string_view value, int64_t min,
                                 int64_t max) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v)) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=", value, ": not an integer"));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, ": must be in ", min, "..", max));
  }
  return v;
}

absl::StatusOr<std::chrono::milliseconds> ParseSeconds(absl::string_view what,
                                                       absl::string_view value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, ": not a non-negative number of seconds"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(v * 1000)));
}

absl::StatusOr<bool> ParseBool(absl::string_view what, absl::string_view value) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat(what, "=", value, ": not a boolean"));
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view what, absl::string_view value,
                                       int default_port) {
  HostPort hp;
  hp.port = default_port;
  absl::string_view port_text;
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=: empty address"));
  }
  if (value.front() == '[') {
    const size_t close = value.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(what, "=", value, ": missing ']'"));
    }
    hp.host = std::string(value.substr(1, close - 1));
    absl::string_view rest = value.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return absl::InvalidArgumentError(
            absl::StrCat(what, "=", value, ": expected ':' after ']'"));
      }
      port_text = rest.substr(1);
    }
  } else {
    const size_t first = value.find(':');
    const size_t last = value.rfind(':');
    if (first != last) {  // several colons: a bare IPv6 address, no port
      hp.host = std::string(value);
    } else if (first == absl::string_view::npos) {
      hp.host = std::string(value);
    } else {
      hp.host = std::string(value.substr(0, first));
      port_text = value.substr(first + 1);
    }
  }
  if (hp.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=", value, ": empty host"));
  }
  if (!port_text.empty() || (value.back() == ':')) {
    int64_t port = 0;
    if (!absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "=", value, ": port must be in 1..65535"));
    }
    hp.port = static_cast<int>(port);
  }
  return hp;
}

std::string RandomHex(int bytes) {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(static_cast<size_t>(bytes) * 2);
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xff;
    out.push_back(kHex[v >> 4]);
    out.push_back(kHex[v & 0xf]);
  }
  return out;
}

std::string FormatHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace ddprun
