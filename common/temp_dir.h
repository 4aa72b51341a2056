// A fresh private directory under $TMPDIR (or /tmp), for files a run keeps only while it lives.
#ifndef DDPRUN_COMMON_TEMP_DIR_H_
#define DDPRUN_COMMON_TEMP_DIR_H_

#include <string>

#include "absl/status/statusor.h"

namespace ddprun {

// Creates "$TMPDIR/PREFIX-XXXXXX" (mode 0700, "/tmp" when TMPDIR is unset) with mkdtemp and
// returns its path; kInternal "mkdtemp PATH: REASON" when it cannot. The caller removes it.
absl::StatusOr<std::string> MakeTempDir(const std::string& prefix);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_TEMP_DIR_H_
