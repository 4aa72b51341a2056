// Parsing of the small values that flags, YAML and environment variables carry. Every error
// message names the flag (or key) and the offending value, so callers can print it as is.
#ifndef DDPRUN_COMMON_STRINGS_H_
#define DDPRUN_COMMON_STRINGS_H_

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddprun {

// `value` as an error message quotes it: on one line (control characters C-escaped) and, when
// longer than 80 bytes, its first 64 followed by "... (N bytes)".
std::string ValueForMessage(absl::string_view value);

// Text from outside ddprun (a worker's error file, another node's failure message, a health
// check's output) made safe to print on one line of a log or a terminal: control characters
// (C0, DEL, and C1 such as the 8-bit CSI) and bytes that are not UTF-8 are C-escaped ("\n",
// "\x1b", "\u009b"); printable UTF-8 stays as it is. A forged log line or a terminal escape
// sequence in it is shown, never obeyed.
std::string Printable(absl::string_view text);

// A whole-string decimal integer in [min, max]; `what` names the flag, e.g. "--max-restarts".
absl::StatusOr<int64_t> ParseInt(absl::string_view what, absl::string_view value, int64_t min,
                                 int64_t max);

// The longest duration any flag or setting may give: 100 days. Far beyond any real timeout, and
// far enough from the limits of std::chrono's nanoseconds (292 years) that a deadline "now +
// duration", or a duration times a small factor, cannot overflow.
inline constexpr int64_t kMaxSeconds = 100 * 24 * 3600;

// Seconds as a decimal number ("0.1", "30"), finite, in [0, kMaxSeconds].
absl::StatusOr<std::chrono::milliseconds> ParseSeconds(absl::string_view what,
                                                       absl::string_view value);

// "true/false/1/0/yes/no/on/off" (case-insensitive).
absl::StatusOr<bool> ParseBool(absl::string_view what, absl::string_view value);

struct HostPort {
  std::string host;  // without IPv6 brackets
  int port = 0;      // 0 when the text had none and no default was given
};

// "host", "host:port", "1.2.3.4:5", "[::1]:5", "::1" (a bare IPv6 address has no port). A host
// is an IP address (IPv6 with an optional %zone) or a name of letters, digits, '-', '.' and '_',
// at most 253 bytes; anything else ("a:1:2", "http://h:1", "a:1,b:2") is kInvalidArgument.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view what, absl::string_view value,
                                       int default_port);

// `bytes` random bytes as lowercase hex (run ids, node ids, private tokens).
std::string RandomHex(int bytes);

// "[::1]:5" for IPv6 hosts, "host:5" otherwise.
std::string FormatHostPort(absl::string_view host, int port);

// 127.x.x.x, ::1 or localhost: an address that names whichever host it is used on.
bool IsLoopbackHost(absl::string_view host);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_STRINGS_H_
