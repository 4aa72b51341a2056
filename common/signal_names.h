// Signal names as ddprun reads and writes them ("SIGTERM"), one table for the whole program:
// the C library's (sigabbrev_np), so every signal of this system has its usual name.
#ifndef DDPRUN_COMMON_SIGNAL_NAMES_H_
#define DDPRUN_COMMON_SIGNAL_NAMES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ddprun {

// 11 -> "SIGSEGV"; "signal 77" when the signal has no name.
std::string SignalName(int signal);

// 9 -> "SIGKILL (9)": the name and the number, as failure messages write them.
std::string SignalNameAndNumber(int signal);

// "SIGTERM", "TERM", "sigterm", "15" -> 15 (surrounding blanks ignored); 0 when it names no
// signal of this system.
int SignalFromName(absl::string_view name);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_SIGNAL_NAMES_H_
