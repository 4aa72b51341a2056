// A LibTorch archive (the checkpoint payload, torch::serialize::OutputArchive's zip) that came
// from a peer, checked before torch::jit::load sees it: loading compiles the archive's TorchScript
// code and runs any __setstate__ it defines, and allocates and inflates what its zip directory
// claims. A payload of ddp-train's own making has no methods, stored tensor records and a few
// KiB of deflated code, so anything else is refused. Pure; thread-safe.
#ifndef DDPRUN_TRAINER_IO_ARCHIVE_CHECK_H_
#define DDPRUN_TRAINER_IO_ARCHIVE_CHECK_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ddprun::trainer {

// OK when every record of the zip `zip` lies within it and is stored, or deflated to at most
// 1 MiB (inflated here to check it), when its code records (".../code/*.py") define no method
// ("def", a decorator) and its pickles name no TorchScript custom class ("torch.classes").
// kInvalidArgument naming the first problem.
absl::Status CheckDataOnlyArchive(absl::string_view zip);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_ARCHIVE_CHECK_H_
