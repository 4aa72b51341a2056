#include "common/kernel_version.h"

#include <sys/utsname.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ddprun {

bool KernelAtLeast(absl::string_view release, int major, int minor) {
  // "3.10.0-1160.el7.x86_64": the first two dot-separated fields, the second up to its first
  // non-digit ("5.15rc2" reads as 5.15).
  std::vector<absl::string_view> fields = absl::StrSplit(release, absl::MaxSplits('.', 2));
  if (fields.size() < 2) return true;
  absl::string_view minor_digits = fields[1];
  minor_digits = minor_digits.substr(0, minor_digits.find_first_not_of("0123456789"));
  int have_major = 0, have_minor = 0;
  if (!absl::SimpleAtoi(fields[0], &have_major) || !absl::SimpleAtoi(minor_digits, &have_minor)) {
    return true;
  }
  return have_major > major || (have_major == major && have_minor >= minor);
}

absl::Status CheckKernelVersion() {
  utsname u{};
  if (uname(&u) != 0 || KernelAtLeast(u.release, kMinKernelMajor, kMinKernelMinor)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("Linux ", u.release, " is too old: ddprun needs Linux ", kMinKernelMajor, ".",
                   kMinKernelMinor, " or later"));
}

}  // namespace ddprun
