#include "common/strings.h"

#include <arpa/inet.h>

#include <cmath>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ddprun {

std::string ValueForMessage(absl::string_view value) {
  constexpr size_t kLongest = 80, kShown = 64;
  if (value.size() <= kLongest) return absl::CEscape(value);
  return absl::StrCat(absl::CEscape(value.substr(0, kShown)), "... (", value.size(), " bytes)");
}

namespace {

// The length of the UTF-8 sequence at the start of `s` (1-4), or 0 when it is not one.
size_t Utf8SequenceLength(absl::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto continuation = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  if (b(0) < 0x80) return 1;
  if (b(0) >= 0xC2 && b(0) <= 0xDF) return continuation(1) ? 2 : 0;
  if (b(0) >= 0xE0 && b(0) <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (b(0) == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (b(0) == 0xED && b(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (b(0) >= 0xF0 && b(0) <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (b(0) == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (b(0) == 0xF4 && b(1) >= 0x90) return 0;  // beyond U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const unsigned char c = static_cast<unsigned char>(text[0]);
    const size_t n = Utf8SequenceLength(text);
    if (n == 0) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      text.remove_prefix(1);
    } else if (n == 1 && (c < 0x20 || c == 0x7F)) {
      switch (c) {
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
      }
      text.remove_prefix(1);
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[1]) < 0xA0) {
      // U+0080..U+009F: C1 controls, which some terminals obey.
      absl::StrAppend(&out, "\\u00",
                      absl::Hex(static_cast<unsigned char>(text[1]), absl::kZeroPad2));
      text.remove_prefix(2);
    } else {
      out.append(text.data(), n);
      text.remove_prefix(n);
    }
  }
  return out;
}

absl::StatusOr<int64_t> ParseInt(absl::string_view what, absl::string_view value, int64_t min,
                                 int64_t max) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", ValueForMessage(value), ": not an integer"));
  }
  if (v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", ValueForMessage(value), ": must be in ", min, "..", max));
  }
  return v;
}

absl::StatusOr<std::chrono::milliseconds> ParseSeconds(absl::string_view what,
                                                       absl::string_view value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", ValueForMessage(value), ": not a non-negative number of seconds"));
  }
  // Checked before converting: llround of a double beyond int64 is undefined (1e19 s came out
  // as a large negative count).
  if (v > static_cast<double>(kMaxSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=", ValueForMessage(value),
                                                   ": must be at most ", kMaxSeconds,
                                                   " seconds (100 days)"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(v * 1000)));
}

absl::StatusOr<bool> ParseBool(absl::string_view what, absl::string_view value) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return absl::InvalidArgumentError(
      absl::StrCat(what, "=", ValueForMessage(value), ": not a boolean"));
}

namespace {

constexpr size_t kMaxHostLength = 253;  // the longest DNS name

bool IsIpv6(absl::string_view text) {
  // A zone ("fe80::1%eth0", or "%25eth0" as gRPC writes it) is not part of the address.
  const std::string address(text.substr(0, text.find('%')));
  in6_addr out;
  return inet_pton(AF_INET6, address.c_str(), &out) == 1;
}

bool IsHostName(absl::string_view text) {
  if (text.empty() || text.size() > kMaxHostLength) return false;
  for (char c : text) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '.' && c != '_') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view what, absl::string_view value,
                                       int default_port) {
  HostPort hp;
  hp.port = default_port;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, "=", ValueForMessage(value), ": ", why));
  };
  if (value.empty()) return bad("empty address");
  absl::string_view port_text;
  bool has_port = false;
  if (value.front() == '[') {
    const size_t close = value.find(']');
    if (close == absl::string_view::npos) return bad("missing ']'");
    hp.host = std::string(value.substr(1, close - 1));
    absl::string_view rest = value.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("expected ':' after ']'");
      port_text = rest.substr(1);
      has_port = true;
    }
    if (!IsIpv6(hp.host)) return bad("expected an IPv6 address inside [...]");
  } else {
    const size_t first = value.find(':');
    const size_t last = value.rfind(':');
    if (first != last) {  // several colons: only a bare IPv6 address, without a port
      if (!IsIpv6(value)) {
        return bad("expected HOST[:PORT] (one host; an IPv6 address with a port as [ADDR]:PORT)");
      }
      hp.host = std::string(value);
    } else if (first == absl::string_view::npos) {
      hp.host = std::string(value);
    } else {
      hp.host = std::string(value.substr(0, first));
      port_text = value.substr(first + 1);
      has_port = true;
    }
    if (hp.host.empty()) return bad("empty host");
    if (!IsIpv6(hp.host) && !IsHostName(hp.host)) {
      return bad(
          absl::StrCat("expected HOST[:PORT], a host being an IP address or a name of "
                       "letters, digits, '-', '.' and '_' (at most ",
                       kMaxHostLength, " bytes)"));
    }
  }
  if (hp.host.empty()) return bad("empty host");
  if (has_port) {
    int64_t port = 0;
    if (port_text.empty() || port_text.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
      return bad("port must be in 1..65535");
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

bool IsLoopbackHost(absl::string_view host) {
  return absl::StartsWith(host, "127.") || host == "::1" || host == "localhost";
}

std::string FormatHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace ddprun
