#include "common/env_variables.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace ddprun {

std::vector<EnvVariable> DdprunVariables() {
  return {kRdzvTokenVariable,
          kEtcdPasswordVariable,
          kNoSlurmVariable,
          kNoPlatformVariable,
          kKernelLogVariable,
          kGrpcPluginVariable,
          kSysfsRootVariable,
          kRoundVariable,
          kProgressFileVariable,
          kControlSocketVariable,
          kCheckpointIntervalAdviceVariable,
          kLeaseFdVariable,
          kPreloadFdVariable,
          kPreloadIdleVariable,
          kPreloadModulesVariable,
          kPreloadProbeVariable,
          kPreloadPythonpathVariable,
          kCacheVariable,
          kArm64SysrootVariable,
          kTorch2VenvVariable,
          kNoTorch2Variable,
          kDistVenvVariable,
          kToolsVenvVariable,
          kRdzvHostVariable,
          kRdzvPortVariable,
          kRdzvArgsVariable};
}

std::string ReadVariable(const Environment& env, const EnvVariable& v) {
  auto it = env.find(v.name);
  return it != env.end() ? it->second : v.value_if_unset;
}

std::string ReadProcessVariable(const EnvVariable& v) {
  const char* value = std::getenv(v.name);
  return value != nullptr ? value : v.value_if_unset;
}

namespace {

std::string Cell(const char* text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}, {"<", "&lt;"}, {">", "&gt;"}});
}

void AppendSection(std::string* out, VariableUse use, const char* title, const char* intro) {
  absl::StrAppend(out, "\n## ", title, "\n\n", intro,
                  "\n\n| Variable | Type | Default | Read by | What it does |\n"
                  "|---|---|---|---|---|\n");
  for (const EnvVariable& v : DdprunVariables()) {
    if (v.use != use) continue;
    absl::StrAppend(out, "| `", v.name, "` | ", Cell(v.type), " | ", Cell(v.default_value), " | ",
                    Cell(v.readers), " | ", Cell(v.meaning), " |\n");
  }
}

}  // namespace

std::string EnvironmentReferenceMarkdown() {
  std::string out =
      "<!-- Generated from the table in common/env_variables.h by `make flag-reference`; do "
      "not edit. A test fails when this file differs from the table, or when the code reads a "
      "DDPRUN_* variable the table does not list. -->\n"
      "# Environment variables\n\n"
      "Every `DDPRUN_*` variable ddprun, ddprun-rdzv, ddp-train, the Python modules and the "
      "build scripts read or set. ddprun also reads torchrun's variables as torchrun does: "
      "`PET_<FLAG>` for every flag ([flags.md](flags.md)), `TORCHELASTIC_ENABLE_FILE_TIMER`, "
      "`TORCHELASTIC_TIMER_FILE`, `TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT`, "
      "`TORCH_ELASTIC_SHUTDOWN_TIMEOUT` and `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`, and "
      "inside a Slurm job step the step's `SLURM_*` variables. A bad value stops ddprun before "
      "anything starts, with one line naming the variable and the value (exit code 2).\n";
  AppendSection(&out, VariableUse::kSetting, "Settings",
                "Set by the user for ddprun, `ddprun status` or ddprun-rdzv.");
  AppendSection(&out, VariableUse::kToWorkers, "Set for the workers",
                "ddprun sets these in the environment of each worker (or spare interpreter); "
                "the worker reads them. A worker started by anything else does not see them.");
  AppendSection(&out, VariableUse::kTesting, "For tests",
                "Test hooks: the project's tests set them to run ddprun against a fake machine. "
                "A real job never needs them.");
  AppendSection(&out, VariableUse::kBuild, "Build and packaging",
                "Read by the build scripts (`make`), the cross build and the packaged service, "
                "not by the programs.");
  return out;
}

}  // namespace ddprun
