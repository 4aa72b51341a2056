#include "launcher/process/stack_text.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace ddprun::launcher {
namespace {

// The first block of consecutive lines for which `is_frame` holds.
std::vector<std::string> FirstBlock(absl::string_view text, size_t n,
                                    bool (*is_frame)(absl::string_view)) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (is_frame(trimmed)) {
      if (out.size() < n) out.emplace_back(trimmed);
    } else if (!out.empty()) {
      break;
    }
  }
  return out;
}

bool IsPythonFrame(absl::string_view line) { return absl::StartsWith(line, "File \""); }

bool IsNativeFrame(absl::string_view line) {
  return line.size() > 1 && line[0] == '#' && absl::ascii_isdigit(line[1]);
}

}  // namespace

std::vector<std::string> InnermostFrames(absl::string_view stacks, size_t n) {
  std::vector<std::string> python = FirstBlock(stacks, n, IsPythonFrame);
  if (!python.empty()) return python;
  return FirstBlock(stacks, n, IsNativeFrame);
}

}  // namespace ddprun::launcher
