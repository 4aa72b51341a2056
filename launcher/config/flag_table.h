// The flag table: every flag of the ddprun command line, with its names, its help and how a
// value of it is read into LaunchOptions. One table for the parser (cli.h), --help, the shell
// completion and the generated reference (docs/reference/flags.md). Pure apart from the host
// facts passed in. The table is constant; the functions are thread-safe.
#ifndef DDPRUN_LAUNCHER_CONFIG_FLAG_TABLE_H_
#define DDPRUN_LAUNCHER_CONFIG_FLAG_TABLE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "launcher/config/completion.h"
#include "launcher/config/flag_value.h"
#include "launcher/config/host_info.h"
#include "launcher/config/options.h"

namespace ddprun::launcher {

// Reads one value of a flag into the options. Errors are kInvalidArgument naming the source and
// the value ("--nnodes=x: ...", "PET_NNODES=x: ...", "job.yaml:3: nnodes=x: ...").
using ApplyFn = absl::Status (*)(const FlagValue& v, const HostInfo& host, LaunchOptions* o);

struct FlagDef {
  const char* name;        // canonical spelling with dashes
  const char* short_name;  // "-m", or "" for none
  bool is_bool;
  const char* help;
  ApplyFn apply;  // reads a value of the flag into the options
  // For shell completion (completion.h): what a value is, and the choices of a kChoice.
  ValueKind value = ValueKind::kText;
  const char* choices = "";
};

// Every flag that sets an option, in --help order. The parser's own options (--config, --help,
// --version, --print-completion) are not in it (cli.cc).
absl::Span<const FlagDef> FlagTable();

// The entry of canonical name `name`, or nullptr.
const FlagDef* FindFlag(absl::string_view name);

// Applies `v` (v.flag a canonical name) to the options.
absl::Status ApplyFlag(const FlagValue& v, const HostInfo& host, LaunchOptions* o);

// How a flag may be written: its short name, --dashed-name and, for a name with dashes, the
// --underscore_name torchrun also accepts. One list for the parser, --help and completion.
std::vector<std::string> Spellings(const FlagDef& f);

// The PET_ variable of a flag, as torchrun names it: PET_NPROC_PER_NODE for nproc-per-node.
std::string PetName(absl::string_view flag);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_FLAG_TABLE_H_
