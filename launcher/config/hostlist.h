// Slurm hostlist expressions ("gpu-a[01-04,07],gpu-b[1-2]"), expanded and compressed by ddprun
// itself so that a job needs no `scontrol show hostnames` (nor Slurm's libraries) to find its
// first host.
//
// Grammar (Slurm's, minus the rarely used `x` stride and the 3-D "[0-1]x[0-1]" forms):
//   list   := entry (',' entry)*          commas inside brackets do not split entries
//   entry  := piece+                      e.g. "rack[1-2]-n[01-02]" (a Cartesian product,
//   piece  := TEXT | '[' range (',' range)* ']'                    first bracket outermost)
//   range  := NUMBER | NUMBER '-' NUMBER  lo <= hi; zero padding = the width of lo as written
// Expansion keeps Slurm's order (the order written; no sorting, no de-duplication), since the
// first host is the one that matters.
#ifndef DDPRUN_LAUNCHER_CONFIG_HOSTLIST_H_
#define DDPRUN_LAUNCHER_CONFIG_HOSTLIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddprun::launcher {

// Refuses (rather than allocates) lists that expand to more hosts than this.
inline constexpr size_t kMaxHostlistHosts = 1 << 16;

// Expands `list` into host names. Malformed input is kInvalidArgument with one line naming the
// list and the 0-based position of the offending character, e.g.
//   hostlist 'n[1-': unterminated '[' at position 1
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view list);

// The first host of `list` without expanding the rest (still validates the whole list).
absl::StatusOr<std::string> FirstHost(absl::string_view list);

// The inverse: a compact hostlist for `hosts`, merging runs of hosts that share a prefix and a
// number width ("n01,n02,n03,x" -> "n[01-03],x"). ExpandHostlist(FormatHostlist(h)) == h for
// any list of names without '[', ']' or ','.
std::string FormatHostlist(const std::vector<std::string>& hosts);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_HOSTLIST_H_
