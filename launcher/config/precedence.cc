#include "launcher/config/precedence.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "launcher/config/flag_table.h"

namespace ddprun::launcher {

std::vector<FlagValue> ExplicitValues(const FlagSources& sources) {
  std::vector<FlagValue> out = sources.environment;
  out.insert(out.end(), sources.yaml.begin(), sources.yaml.end());
  out.insert(out.end(), sources.command_line.begin(), sources.command_line.end());
  return out;
}

std::vector<FlagValue> InPrecedenceOrder(const FlagSources& sources) {
  std::vector<FlagValue> out = sources.job;
  const std::vector<FlagValue> given = ExplicitValues(sources);
  out.insert(out.end(), given.begin(), given.end());
  return out;
}

std::vector<FlagValue> EnvironmentValues(const Environment& env) {
  std::vector<FlagValue> out;
  for (const auto& [variable, flag] :
       {std::pair{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "shutdown-timeout"},
        std::pair{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "log-line-prefix-template"}}) {
    if (auto it = env.find(variable); it != env.end()) out.push_back({flag, it->second, it->first});
  }
  for (const FlagDef& f : FlagTable()) {
    auto it = env.find(PetName(f.name));
    if (it != env.end()) out.push_back({f.name, it->second, it->first});
  }
  return out;
}

absl::StatusOr<ConfigFileValues> FromConfigFile(const std::string& file,
                                                const std::vector<ConfigValue>& values) {
  ConfigFileValues out;
  for (const ConfigValue& v : values) {
    const std::string where = absl::StrCat(file, ":", v.line, ": ", v.key);
    if (v.key == "script" || v.key == "entrypoint") {
      if (v.shape != ConfigValue::Shape::kScalar) {
        return absl::InvalidArgumentError(
            absl::StrCat(where,
                         ": expected one script or program, not a list or a mapping "
                         "(its arguments go under script-args)"));
      }
      out.entrypoint = v.value;
    } else if (v.key == "script-args" || v.key == "args") {
      if (v.shape == ConfigValue::Shape::kMap) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": expected a list of arguments, not a mapping"));
      }
      out.entrypoint_args = v.list.empty() ? std::vector<std::string>{v.value} : v.list;
    } else if (FindFlag(v.key) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ":", v.line, ": unknown key '", v.key, "'"));
    } else {
      out.flags.push_back({v.key, v.value, where});
    }
  }
  return out;
}

}  // namespace ddprun::launcher
