#include "launcher/config/yaml_config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace ddprun::launcher {
namespace {

absl::Status ErrorAt(const std::string& path, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", what));
}

}  // namespace

absl::StatusOr<std::vector<ConfigValue>> LoadYamlConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("--config=", path, ": cannot read the file"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(in);
  } catch (const YAML::Exception& e) {
    return ErrorAt(path, e.mark.line + 1, e.msg);
  }
  std::vector<ConfigValue> values;
  if (root.IsNull()) return values;  // an empty file configures nothing
  if (!root.IsMap()) {
    return ErrorAt(path, root.Mark().line + 1, "expected a mapping of flag names to values");
  }
  for (const auto& entry : root) {
    ConfigValue v;
    v.line = entry.first.Mark().line + 1;
    if (!entry.first.IsScalar()) return ErrorAt(path, v.line, "keys must be flag names");
    v.key = absl::StrReplaceAll(entry.first.as<std::string>(), {{"_", "-"}});
    const YAML::Node& node = entry.second;
    if (node.IsScalar()) {
      v.value = node.as<std::string>();
    } else if (node.IsNull()) {
      v.value = "";
    } else if (node.IsSequence()) {
      for (const auto& item : node) {
        if (!item.IsScalar()) {
          return ErrorAt(path, item.Mark().line + 1,
                         absl::StrCat(v.key, ": list items must be plain values"));
        }
        v.list.push_back(item.as<std::string>());
      }
      v.value = absl::StrJoin(v.list, ",");
    } else if (node.IsMap()) {
      std::vector<std::string> pairs;
      for (const auto& kv : node) {
        if (!kv.first.IsScalar() || !kv.second.IsScalar()) {
          return ErrorAt(path, kv.first.Mark().line + 1,
                         absl::StrCat(v.key, ": map entries must be plain key: value"));
        }
        pairs.push_back(absl::StrCat(kv.first.as<std::string>(), "=", kv.second.as<std::string>()));
      }
      v.value = absl::StrJoin(pairs, ",");
    }
    values.push_back(std::move(v));
  }
  return values;
}

}  // namespace ddprun::launcher
