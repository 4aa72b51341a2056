#include "trainer/io/fault_injection.h"

#include <unistd.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ddprun::trainer {

absl::StatusOr<HangFault> ParseFault(absl::string_view text) {
  absl::string_view rest = text;
  std::vector<absl::string_view> parts;
  if (absl::ConsumePrefix(&rest, "hang@")) parts = absl::StrSplit(rest, ':');
  HangFault fault;
  // SimpleAtoi takes a leading '+' and white space; the digits check keeps the syntax strict.
  const auto is_number = [](absl::string_view s) {
    return !s.empty() && s.find_first_not_of("0123456789") == absl::string_view::npos;
  };
  if (parts.size() != 2 || !is_number(parts[0]) || !is_number(parts[1]) ||
      !absl::SimpleAtoi(parts[0], &fault.step) || !absl::SimpleAtoi(parts[1], &fault.rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fault: '", text, "' is not hang@STEP:RANK (non-negative integers)"));
  }
  return fault;
}

bool FaultDue(const HangFault& fault, int rank, int64_t step, int restart_count) {
  return restart_count == 0 && rank == fault.rank && step == fault.step;
}

void Hang(int rank, int64_t step, std::ostream& log) {
  log << "ddp-train: rank " << rank << ": fault injection: hanging at step " << step << std::endl;
  // The stop signals stay blocked for StopSignal's watcher, whose flag nobody reads any more;
  // SIGKILL still ends the process.
  while (true) pause();
}

}  // namespace ddprun::trainer
