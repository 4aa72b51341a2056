// torchrun's argparse takes any unambiguous prefix of a long option ("--nproc_per=2" for
// "--nproc_per_node=2", "--redirect=3" for "--redirects=3"); job scripts and wrappers rely on it,
// so ddprun does the same. A prefix is matched against torchrun 2.11's own option strings first,
// as argparse matches them (each spelling counts: "--nproc" could be "--nproc-per-node" or
// "--nproc_per_node" and is ambiguous there too), so that it means what it means to torchrun
// even where a flag of ddprun's own begins the same way; then against ddprun's own spellings.
// Only the options before the training script are read; an exact spelling is never expanded.
// Pure.
#ifndef DDPRUN_LAUNCHER_CONFIG_ABBREVIATIONS_H_
#define DDPRUN_LAUNCHER_CONFIG_ABBREVIATIONS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddprun::launcher {

struct LongOptionSpellings {
  std::set<std::string> torchrun;    // torchrun's long option strings ("--nproc-per-node", ...)
  std::set<std::string> own;         // ddprun's other spellings, long ones ("--config", ...)
  std::set<std::string> with_value;  // spellings (short ones too) followed by a value
};

// torchrun 2.11's long option strings (torch.distributed.run.get_args_parser()).
const std::set<std::string>& TorchrunLongOptions();

// `args` with each abbreviated long option written out whole ("--redirect=3" ->
// "--redirects=3"). An ambiguous prefix: kInvalidArgument naming the candidates. A prefix of
// nothing is left as it is (the parser then names it as an unknown flag).
absl::StatusOr<std::vector<std::string>> ExpandAbbreviations(const std::vector<std::string>& args,
                                                             const LongOptionSpellings& spellings);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_ABBREVIATIONS_H_
