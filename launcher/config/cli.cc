#include "launcher/config/cli.h"

#include <CLI/CLI.hpp>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/version.h"
#include "launcher/config/abbreviations.h"
#include "launcher/config/completion.h"
#include "launcher/config/flag_table.h"
#include "launcher/config/flag_value.h"
#include "launcher/config/precedence.h"
#include "launcher/config/validation.h"
#include "launcher/config/yaml_config.h"

namespace ddprun::launcher {
namespace {

// The options the parser handles itself, outside the flag table: they set no option.
struct ParserOption {
  const char* spellings;   // space-separated
  const char* value_name;  // "FILE.yaml"; "" for none
  ValueKind value;
  const char* choices;
  const char* help;             // --help and the reference
  const char* completion_help;  // the shell's one-line description
};
constexpr ParserOption kParserOptions[] = {
    {"--config", "FILE.yaml", ValueKind::kFile, "",
     "Read flags from a YAML file (keys are flag names; at most 1 MiB).",
     "Read flags from a YAML file."},
    {"-h --help", "", ValueKind::kNone, "", "Print this help and exit.",
     "Print the help and exit."},
    {"--version", "", ValueKind::kNone, "", "Print the version and exit.",
     "Print the version and exit."},
    {"--print-completion", "SHELL", ValueKind::kChoice, "bash zsh",
     "Print the completion script for bash or zsh and exit (e.g. "
     "source <(ddprun --print-completion=bash)).",
     "Print the completion script for bash or zsh and exit."},
};

// How --help and the reference write a flag's names: "--nnodes=VALUE", "-m, --module".
std::string NamesOf(const FlagDef& f) {
  std::string names = absl::StrJoin(Spellings(f), ", ");
  if (!f.is_bool) absl::StrAppend(&names, "=VALUE");
  return names;
}
std::string NamesOf(const ParserOption& p) {
  std::string names = absl::StrJoin(absl::StrSplit(p.spellings, ' '), ", ");
  if (p.value_name[0] != '\0') absl::StrAppend(&names, "=", p.value_name);
  return names;
}

// Every flag of the command line for the shell's completion, in --help order.
std::vector<CompletionFlag> CompletionFlags() {
  std::vector<CompletionFlag> out;
  for (const FlagDef& f : FlagTable()) {
    CompletionFlag c;
    c.spellings = Spellings(f);
    c.value = f.is_bool ? ValueKind::kNone : f.value;
    c.choices = absl::StrSplit(f.choices, ' ', absl::SkipEmpty());
    c.help = f.help;
    out.push_back(std::move(c));
  }
  for (const ParserOption& p : kParserOptions) {
    out.push_back({absl::StrSplit(p.spellings, ' '), p.value,
                   absl::StrSplit(p.choices, ' ', absl::SkipEmpty()), p.completion_help});
  }
  return out;
}

// Every spelling the command line takes (those of CompletionFlags).
std::vector<std::string> CompletionSpellings() {
  std::vector<std::string> out;
  for (const CompletionFlag& f : CompletionFlags()) {
    out.insert(out.end(), f.spellings.begin(), f.spellings.end());
  }
  return out;
}

// CLI11 reads "--flag=" as "--flag" without a value and takes the next argument as the value
// ("--master-addr= --no-python" set the address to "--no-python"). Up to the training script,
// "--flag=" of a flag that takes a value becomes "--flag" "": an empty value, as argparse reads
// it, which the flag's apply function then accepts (torchrun's default) or refuses.
std::vector<std::string> SplitEmptyValues(const std::vector<std::string>& args,
                                          const std::set<std::string>& value_spellings) {
  std::vector<std::string> out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") break;  // the script (or "--") and after
    if (value_spellings.count(a) > 0) {  // "--flag VALUE": VALUE is not a flag, whatever it is
      out.push_back(a);
      if (i + 1 < args.size()) out.push_back(args[++i]);
      continue;
    }
    if (a.back() == '=' && value_spellings.count(a.substr(0, a.size() - 1)) > 0) {
      out.push_back(a.substr(0, a.size() - 1));
      out.emplace_back();
      continue;
    }
    out.push_back(a);
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

// The command line as CLI11 read it: each flag's last value, the parser's own options and
// what follows the options (the entrypoint and its arguments).
struct ArgsRead {
  std::vector<FlagValue> flags;  // in the table's order, named "--FLAG"
  std::string config_file;
  bool want_help = false;
  bool want_version = false;
  std::string completion_shell;
  std::vector<std::string> rest;
};

// The spellings of every option that takes a value, for SplitEmptyValues and the abbreviations.
std::set<std::string> ValueSpellings() {
  std::set<std::string> out = {"--config", "--print-completion"};
  for (const FlagDef& f : FlagTable()) {
    if (f.is_bool) continue;
    for (const std::string& s : Spellings(f)) out.insert(s);
  }
  return out;
}

absl::StatusOr<ArgsRead> ReadArgs(const std::vector<std::string>& args) {
  CLI::App app("ddprun");
  app.set_help_flag();   // our own --help text
  app.prefix_command();  // stop at the training script; everything after it is the script's
  app.allow_windows_style_options(false);
  std::map<std::string, std::string> values;
  std::map<std::string, CLI::Option*> options;
  for (const FlagDef& f : FlagTable()) {
    const std::string names = absl::StrJoin(Spellings(f), ",");
    std::string& slot = values[f.name];
    options[f.name] = f.is_bool ? app.add_flag_callback(names, [&slot] { slot = "true"; })
                                : app.add_option(names, slot)->allow_extra_args(false);
  }
  ArgsRead read;
  CLI::Option* config_option = app.add_option("--config", read.config_file);
  CLI::Option* completion_option = app.add_option("--print-completion", read.completion_shell);
  app.add_flag("-h,--help", read.want_help);
  app.add_flag("--version", read.want_version);

  const std::set<std::string> value_spellings = ValueSpellings();
  LongOptionSpellings long_options{TorchrunLongOptions(), {}, value_spellings};
  for (const std::string& s : CompletionSpellings()) {
    if (absl::StartsWith(s, "--") && long_options.torchrun.count(s) == 0) {
      long_options.own.insert(s);
    }
  }
  DDPRUN_ASSIGN_OR_RETURN(const std::vector<std::string> expanded,
                          ExpandAbbreviations(args, long_options));
  const std::vector<std::string> split = SplitEmptyValues(expanded, value_spellings);
  std::vector<std::string> reversed(split.rbegin(), split.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (config_option->count() > 0 && read.config_file.empty()) {
    return absl::InvalidArgumentError("--config=: names no file");
  }
  if (completion_option->count() > 0 && read.completion_shell.empty()) {
    return absl::InvalidArgumentError("--print-completion=: expected bash or zsh");
  }
  for (const FlagDef& f : FlagTable()) {
    if (options[f.name]->count() > 0) {
      read.flags.push_back({f.name, values[f.name], absl::StrCat("--", f.name)});
    }
  }
  read.rest = app.remaining();
  return read;
}

// --help, --version, --print-completion: the text to print, or nullopt to go on.
absl::StatusOr<std::optional<std::string>> ImmediateAnswer(const ArgsRead& read) {
  if (read.want_help) return HelpText();
  if (read.want_version) return absl::StrCat("ddprun ", kVersion, "\n");
  if (!read.completion_shell.empty()) {
    DDPRUN_ASSIGN_OR_RETURN(std::string text,
                            CompletionScript(read.completion_shell, CompletionFlags()));
    return text;
  }
  return std::nullopt;
}

// Every source's values (precedence.h): the environment's, the config file's, the command
// line's and, inside a Slurm step or on a platform's node, the job's defaults, whose plan goes
// to `result`. A Slurm step's GPUs stand for the host's (`host`).
absl::StatusOr<FlagSources> ReadSources(const ArgsRead& read, const Environment& env,
                                        CommandLine* result, HostInfo* host) {
  FlagSources sources;
  sources.environment = EnvironmentValues(env);
  sources.command_line = read.flags;
  LaunchOptions& o = result->options;
  if (!read.config_file.empty()) {
    o.config_file = read.config_file;
    DDPRUN_ASSIGN_OR_RETURN(const std::vector<ConfigValue> values,
                            LoadYamlConfig(read.config_file));
    DDPRUN_ASSIGN_OR_RETURN(ConfigFileValues file, FromConfigFile(read.config_file, values));
    sources.yaml = std::move(file.flags);
    if (read.rest.empty()) {  // a script on the command line replaces the file's, with its args
      o.entrypoint = file.entrypoint;
      o.entrypoint_args = file.entrypoint_args;
    }
  }
  const std::vector<FlagValue> given = ExplicitValues(sources);
  if (SlurmWanted(env, given)) {
    DDPRUN_ASSIGN_OR_RETURN(SlurmStep step, ReadSlurmStep(env));
    DDPRUN_ASSIGN_OR_RETURN(result->slurm, PlanSlurm(step, given));
    host->gpu_count = step.gpus;
    sources.job = result->slurm->defaults;
  } else {
    DDPRUN_ASSIGN_OR_RETURN(result->platform, PlanPlatform(env, given));
    if (result->platform) sources.job = result->platform->defaults;
  }
  return sources;
}

}  // namespace

std::string HelpText() {
  std::string text =
      "Usage: ddprun [options] TRAINING_SCRIPT [script args...]\n"
      "  or:  ddprun [options] -m MODULE [args...]\n"
      "  or:  ddprun [options] --no-python PROGRAM [args...]\n"
      "  or:  ddprun status --rdzv-endpoint=HOST:PORT --rdzv-id=ID (see ddprun status --help)\n"
      "\n"
      "Native replacement for torchrun: same flags (dashes or underscores; a long flag may be\n"
      "abbreviated to any unambiguous prefix, as torchrun's argparse takes it), same worker\n"
      "environment. Every flag can also come from --config FILE.yaml (same names as keys) or\n"
      "from a PET_<FLAG> environment variable; the command line wins, then the file.\n"
      "\nOptions:\n";
  auto add = [&](const std::string& names, const std::string& help) {
    absl::StrAppend(&text, "  ", names, "\n      ", help, "\n");
  };
  for (const FlagDef& f : FlagTable()) add(NamesOf(f), f.help);
  for (const ParserOption& p : kParserOptions) add(NamesOf(p), p.help);
  text +=
      "\nExit status: 0 success; 1 workers failed and the restart budget is spent; 2 usage or\n"
      "configuration error; 3 rendezvous failure; 4 the same failure twice before any progress\n"
      "(--crash-loop=stop); 5 this node was kept out or evicted as slow and the job ended without\n"
      "it (--preflight, --evict-slow); 128+N stopped by signal N.\n"
      "\nDocumentation: README.md and docs/ (guide/, reference/, troubleshooting.md) in the\n"
      "source tree, installed in /usr/share/doc/ddprun by the package; `make docs` renders them\n"
      "as a site; man ddprun, ddprun-rdzv, ddp-train.\n";
  return text;
}

namespace {

// Text for a Markdown table cell: '|' would end the cell, '<' and '>' would read as HTML.
std::string MarkdownCell(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}, {"<", "&lt;"}, {">", "&gt;"}});
}

std::string CodeList(const std::vector<std::string>& names) {
  return absl::StrCat("`", absl::StrJoin(names, "`, `"), "`");
}

}  // namespace

std::string FlagReferenceMarkdown() {
  std::string out =
      "<!-- Generated from the flag table (launcher/config/flag_table.cc) by `make "
      "flag-reference`; do not edit. A test fails when this file differs from the table. -->\n"
      "# Command-line flags\n\n"
      "`ddprun --help` prints the same list. Every flag below has the same meaning as torchrun's "
      "flag of the same name, and may be written with dashes or underscores "
      "(`--nproc-per-node`, `--nproc_per_node`); a long flag may be abbreviated to any "
      "unambiguous prefix, as torchrun's argparse takes it. Everything after the training "
      "script (or `-m MODULE`, or `--no-python PROGRAM`) is passed to it untouched.\n\n"
      "Each flag can come from several sources. The strongest wins:\n\n"
      "1. the command line;\n"
      "2. the YAML file named by `--config` (the flag's name is the key: `nproc-per-node: 4`);\n"
      "3. the `PET_<FLAG>` environment variable torchrun reads (`PET_NPROC_PER_NODE=4`), then "
      "torch 2.x's `TORCH_ELASTIC_SHUTDOWN_TIMEOUT` (`--shutdown-timeout`) and "
      "`TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE` (`--log-line-prefix-template`);\n"
      "4. inside a Slurm job step, what the step implies (`--no-slurm` turns it off), or on a "
      "node a platform describes with `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE` and `RANK`, "
      "what those imply (`--no-platform-env` turns it off);\n"
      "5. torchrun's defaults.\n\n"
      "A bad value stops ddprun before anything starts, with exit code 2 and one line naming "
      "the flag (or the variable, or `FILE:LINE`) and the value. Environment variables of "
      "ddprun's own: [environment.md](environment.md).\n\n"
      "| Flag | Value | Environment | Description |\n"
      "|---|---|---|---|\n";
  for (const FlagDef& f : FlagTable()) {
    const char* value = f.is_bool                       ? "none (a switch)"
                        : f.value == ValueKind::kFolder ? "a folder"
                        : f.value == ValueKind::kFile   ? "a file"
                                                        : "a value";
    absl::StrAppend(&out, "| ", CodeList(Spellings(f)), " | ", value, " | `", PetName(f.name),
                    "` | ", MarkdownCell(f.help), " |\n");
  }
  absl::StrAppend(&out,
                  "\nThe parser's own options, which set nothing and come only from the command "
                  "line:\n\n| Option | Value | Description |\n|---|---|---|\n");
  for (const ParserOption& p : kParserOptions) {
    std::vector<std::string> spellings = absl::StrSplit(p.spellings, ' ');
    absl::StrAppend(&out, "| ", CodeList(spellings), " | ",
                    p.value_name[0] == '\0' ? "none" : p.value_name, " | ", MarkdownCell(p.help),
                    " |\n");
  }
  return out;
}

Environment WithLaunchDefaults(Environment env) {
  env.emplace(PetName("local-rank-arg"), "local-rank");  // one the user set stays
  return env;
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                             const Environment& env, const HostInfo& host) {
  CommandLine result;
  DDPRUN_ASSIGN_OR_RETURN(const ArgsRead read, ReadArgs(args));
  DDPRUN_ASSIGN_OR_RETURN(std::optional<std::string> answer, ImmediateAnswer(read));
  if (answer.has_value()) {
    result.exit_now = true;
    result.text = *std::move(answer);
    return result;
  }
  const std::vector<std::string>& rest = read.rest;
  if (!rest.empty() && absl::StartsWith(rest.front(), "-") && rest.front() != "-") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown flag ", std::vector<std::string>(absl::StrSplit(rest.front(), '='))[0],
        " (see --help)"));
  }
  HostInfo effective_host = host;
  DDPRUN_ASSIGN_OR_RETURN(const FlagSources sources,
                          ReadSources(read, env, &result, &effective_host));
  for (const FlagValue& v : InPrecedenceOrder(sources)) {
    DDPRUN_RETURN_IF_ERROR(ApplyFlag(v, effective_host, &result.options));
  }
  if (!rest.empty()) {
    result.options.entrypoint = rest.front();
    result.options.entrypoint_args.assign(rest.begin() + 1, rest.end());
  }
  DDPRUN_RETURN_IF_ERROR(Validate(env, &result.options, &result.warnings));
  return result;
}

}  // namespace ddprun::launcher
