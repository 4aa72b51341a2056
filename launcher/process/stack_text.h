// Reading a stacks.txt written for a hung worker: the innermost frames to show in the summary.
// Pure text handling of the two formats the file holds: CPython's faulthandler dump
// ("  File \"x.py\", line 2 in inner", innermost first) and eu-stack / gdb backtraces
// ("#0  0x... clock_nanosleep", innermost first).
#ifndef DDPRUN_LAUNCHER_PROCESS_STACK_TEXT_H_
#define DDPRUN_LAUNCHER_PROCESS_STACK_TEXT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ddprun::launcher {

// Up to `n` innermost frames of the first thread: the Python frames when the text has a
// faulthandler dump (they say more to a Python user), else the native ones. Each frame is one
// trimmed line.
std::vector<std::string> InnermostFrames(absl::string_view stacks, size_t n);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PROCESS_STACK_TEXT_H_
