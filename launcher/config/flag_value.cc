#include "launcher/config/flag_value.h"

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

}  // namespace ddprun::launcher
