#include "launcher/causes/kmsg_record.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace ddprun::launcher {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The kernel writes non-printable bytes and '\' itself as \xNN.
std::string Unescape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() && text[i + 1] == 'x') {
      const int hi = HexDigit(text[i + 2]);
      const int lo = HexDigit(text[i + 3]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 3;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

}  // namespace

std::optional<KmsgRecord> ParseKmsgRecord(absl::string_view raw) {
  const size_t semicolon = raw.find(';');
  if (semicolon == absl::string_view::npos) return std::nullopt;
  const std::vector<absl::string_view> header = absl::StrSplit(raw.substr(0, semicolon), ',');
  if (header.size() < 4) return std::nullopt;
  int pri = 0;
  KmsgRecord r;
  if (!absl::SimpleAtoi(header[0], &pri) || pri < 0 || !absl::SimpleAtoi(header[1], &r.seq) ||
      !absl::SimpleAtoi(header[2], &r.timestamp_us) || r.timestamp_us < 0) {
    return std::nullopt;
  }
  r.facility = pri >> 3;
  r.level = pri & 7;
  absl::string_view text = raw.substr(semicolon + 1);
  // The message ends at the first newline; continuation lines (" KEY=VALUE") follow it.
  if (const size_t end = text.find('\n'); end != absl::string_view::npos)
    text = text.substr(0, end);
  r.text = Unescape(text);
  return r;
}

}  // namespace ddprun::launcher
