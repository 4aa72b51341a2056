// torchrun's macros: Python's string.Template rules, the argument macro `$local_rank` and the
// values of --log-line-prefix-template. Pure functions.
#ifndef DDPRUN_LAUNCHER_CONFIG_TEMPLATE_MACROS_H_
#define DDPRUN_LAUNCHER_CONFIG_TEMPLATE_MACROS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ddprun::launcher {

// Python's string.Template.safe_substitute, which torchrun uses for its macros: `${name}` and
// `$name` become values[name], `$$` becomes `$`, and anything else after a `$` (a name not in
// `values`, an unclosed `${`) stays as written; such names are added to `unknown` when given.
std::string SubstituteTemplate(absl::string_view text,
                               const std::map<std::string, std::string>& values,
                               std::vector<std::string>* unknown = nullptr);

// The macros of --log-line-prefix-template for one worker.
std::map<std::string, std::string> LogLinePrefixValues(const std::string& role_name, int rank,
                                                       int local_rank, const std::string& hostname);

// torchrun's argument macros (torch.distributed.elastic.utils.api.macros): `${local_rank}` and
// `$local_rank` become the local rank; see SubstituteTemplate.
std::string SubstituteMacros(absl::string_view arg, int local_rank);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_TEMPLATE_MACROS_H_
