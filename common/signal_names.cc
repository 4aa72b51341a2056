#include "common/signal_names.h"

#include <signal.h>
#include <string.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ddprun {

std::string SignalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  if (abbrev == nullptr) return absl::StrCat("signal ", signal);
  return absl::StrCat("SIG", abbrev);
}

std::string SignalNameAndNumber(int signal) {
  return absl::StrCat(SignalName(signal), " (", signal, ")");
}

int SignalFromName(absl::string_view name) {
  std::string n = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name));
  int number = 0;
  if (absl::SimpleAtoi(n, &number)) return number > 0 && number < NSIG ? number : 0;
  if (!absl::StartsWith(n, "SIG")) n = "SIG" + n;
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = sigabbrev_np(sig);
    if (abbrev != nullptr && n == absl::StrCat("SIG", abbrev)) return sig;
  }
  return 0;
}

}  // namespace ddprun
