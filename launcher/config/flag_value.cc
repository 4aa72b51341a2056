#include "launcher/config/flag_value.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/strings.h"

namespace ddprun::launcher {

const FlagValue* LastFlagValue(const std::vector<FlagValue>& flags, absl::string_view name) {
  const FlagValue* found = nullptr;
  for (const FlagValue& f : flags) {
    if (f.flag == name) found = &f;
  }
  return found;
}

bool FlagIsTrue(const std::vector<FlagValue>& flags, absl::string_view name) {
  const FlagValue* f = LastFlagValue(flags, name);
  if (f == nullptr) return false;
  absl::StatusOr<bool> on = ParseBool(f->where, f->value);
  return on.ok() && *on;
}

absl::Status ParseNnodes(const std::string& what, const std::string& value, int* min_nodes,
                         int* max_nodes) {
  std::vector<std::string> parts = absl::StrSplit(value, ':');
  int64_t lo = 0, hi = 0;
  const int64_t kMaxNodes = 1 << 20;
  if (parts.size() == 1 && absl::SimpleAtoi(parts[0], &lo)) {
    hi = lo;
  } else if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &lo) ||
             !absl::SimpleAtoi(parts[1], &hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, ": expected N or MIN:MAX (e.g. 2 or 1:4)"));
  }
  if (lo < 1 || hi > kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, ": node counts must be in 1..", kMaxNodes));
  }
  if (lo > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, ": MIN (", lo, ") is greater than MAX (", hi, ")"));
  }
  *min_nodes = static_cast<int>(lo);
  *max_nodes = static_cast<int>(hi);
  return absl::OkStatus();
}

absl::StatusOr<StdSpec> ParseStdSpec(const std::string& what, const std::string& value) {
  StdSpec spec;
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value,
                     ": expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or "
                     "LOCAL_RANK:MASK,... (e.g. 0:3,1:2)"));
  };
  if (value.find(':') == std::string::npos) {
    if (!absl::SimpleAtoi(value, &spec.all) || spec.all < 0 || spec.all > 3) return bad();
    return spec;
  }
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, ':');
    int rank = 0, mask = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &rank) || !absl::SimpleAtoi(kv[1], &mask) ||
        rank < 0 || mask < 0 || mask > 3) {
      return bad();
    }
    spec.per_rank[rank] = mask;
  }
  return spec;
}

}  // namespace ddprun::launcher
