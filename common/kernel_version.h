// The running kernel against the oldest one ddprun supports. The static binaries run on any
// Linux (docs/guide/install.md, "Static binaries"), so an older kernel is refused at start with one
// line rather than failing later on a system call it lacks.
#ifndef DDPRUN_COMMON_KERNEL_VERSION_H_
#define DDPRUN_COMMON_KERNEL_VERSION_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddprun {

// Linux 3.10 (RHEL 7's kernel, the oldest a training cluster still runs): what the agent uses
// (signalfd, eventfd, PR_SET_CHILD_SUBREAPER from 3.4) is older; --preload's memfd_create
// needs 3.17 and says so itself when it fails.
inline constexpr int kMinKernelMajor = 3;
inline constexpr int kMinKernelMinor = 10;

// Whether a uname release string ("6.1.0-18-amd64", "3.10.0-1160.el7.x86_64") is at least
// major.minor. A string that does not start with "N.N" counts as new enough: a kernel that
// names itself oddly is not refused on a guess.
bool KernelAtLeast(absl::string_view release, int major, int minor);

// FailedPrecondition naming the running kernel when it is older than kMinKernelMajor.Minor.
absl::Status CheckKernelVersion();

}  // namespace ddprun

#endif  // DDPRUN_COMMON_KERNEL_VERSION_H_
