// --fault=hang@STEP:RANK, a hidden flag for testing launchers: rank RANK stops making progress
// once the global step counter is at STEP: right after step STEP (its optimizer update and step
// report done; for STEP 0 or a run resumed at STEP, after the start report), forever, as a rank
// stuck in a collective would. It ignores stop signals from then on; only SIGKILL ends it. It fires
// on a group's first attempt only (TORCHELASTIC_RESTART_COUNT unset or 0), so a restarted
// group can finish.
#ifndef DDPRUN_TRAINER_IO_FAULT_INJECTION_H_
#define DDPRUN_TRAINER_IO_FAULT_INJECTION_H_

#include <cstdint>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddprun::trainer {

struct HangFault {
  int64_t step = 0;
  int rank = 0;
};

// "hang@<step>:<rank>", both non-negative integers. kInvalidArgument naming --fault and `text`.
absl::StatusOr<HangFault> ParseFault(absl::string_view text);

// True when `fault` is due now: this rank, this step, the first attempt.
bool FaultDue(const HangFault& fault, int rank, int64_t step, int restart_count);

// Writes "ddp-train: rank R: fault injection: hanging at step S" to `log` and never returns.
[[noreturn]] void Hang(int rank, int64_t step, std::ostream& log);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_FAULT_INJECTION_H_
