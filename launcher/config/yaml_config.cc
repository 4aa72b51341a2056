#include "launcher/config/yaml_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace ddprun::launcher {
namespace {

absl::Status ErrorAt(const std::string& path, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", what));
}

absl::Status FileError(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--config=", path, ": ", what));
}

// The whole file, read without exceptions (an ifstream on a directory threw from inside
// yaml-cpp and aborted ddprun) and never more than kMaxConfigFileBytes. Not only regular files:
// `--config <(generate)` names a pipe.
absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError(path, absl::StrCat("cannot read the file (", strerror(errno), ")"));
  std::string text;
  absl::Status status;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    status = FileError(path, absl::StrCat("cannot read the file (", strerror(errno), ")"));
  } else if (S_ISDIR(st.st_mode)) {
    status = FileError(path, "is a directory");
  } else if (S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) > kMaxConfigFileBytes) {
    status = FileError(path, absl::StrCat("larger than the limit of ", kMaxConfigFileBytes,
                                          " bytes (", st.st_size, " bytes)"));
  } else {
    char buf[65536];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = FileError(path, absl::StrCat("cannot read the file (", strerror(errno), ")"));
        break;
      }
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > kMaxConfigFileBytes) {
        status = FileError(
            path, absl::StrCat("larger than the limit of ", kMaxConfigFileBytes, " bytes"));
        break;
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  return text;
}

// The key as the options know it: dashes, and one name for the two spellings of the entrypoint
// and its arguments.
std::string CanonicalKey(const std::string& key) {
  std::string k = absl::StrReplaceAll(key, {{"_", "-"}});
  if (k == "entrypoint") return "script";
  if (k == "args") return "script-args";
  return k;
}

// Where each key was first given, to name both lines when one comes again (last-wins would
// silently drop a setting, and the command line refuses a flag given twice too).
class SeenKeys {
 public:
  // `scope` prefixes the message: "" for top-level keys, "rdzv-conf: " inside a map value.
  absl::Status Add(const std::string& path, const std::string& scope, const std::string& key,
                   const std::string& canonical, int line) {
    auto [it, inserted] = first_.emplace(canonical, std::pair{key, line});
    if (inserted) return absl::OkStatus();
    const auto& [first_key, first_line] = it->second;
    return ErrorAt(path, line,
                   absl::StrCat(scope, key, " is given again (first on line ", first_line,
                                first_key == key ? "" : absl::StrCat(" as ", first_key), ")"));
  }

 private:
  std::map<std::string, std::pair<std::string, int>> first_;  // canonical -> (as given, line)
};

absl::StatusOr<std::vector<ConfigValue>> ParseConfig(const std::string& path,
                                                     const YAML::Node& root) {
  std::vector<ConfigValue> values;
  if (root.IsNull()) return values;  // an empty file configures nothing
  if (!root.IsMap()) {
    return ErrorAt(path, root.Mark().line + 1, "expected a mapping of flag names to values");
  }
  SeenKeys seen;
  for (const auto& entry : root) {
    ConfigValue v;
    v.line = entry.first.Mark().line + 1;
    if (!entry.first.IsScalar()) return ErrorAt(path, v.line, "keys must be flag names");
    const std::string given = entry.first.as<std::string>();
    if (absl::Status s = seen.Add(path, "", given, CanonicalKey(given), v.line); !s.ok()) return s;
    v.key = absl::StrReplaceAll(given, {{"_", "-"}});
    const YAML::Node& node = entry.second;
    if (node.IsScalar()) {
      v.value = node.as<std::string>();
    } else if (node.IsNull()) {
      v.value = "";
    } else if (node.IsSequence()) {
      v.shape = ConfigValue::Shape::kList;
      for (const auto& item : node) {
        if (!item.IsScalar()) {
          return ErrorAt(path, item.Mark().line + 1,
                         absl::StrCat(v.key, ": list items must be plain values"));
        }
        v.list.push_back(item.as<std::string>());
      }
      v.value = absl::StrJoin(v.list, ",");
    } else if (node.IsMap()) {
      v.shape = ConfigValue::Shape::kMap;
      std::vector<std::string> pairs;
      SeenKeys seen_inside;
      for (const auto& kv : node) {
        const int line = kv.first.Mark().line + 1;
        if (!kv.first.IsScalar() || !kv.second.IsScalar()) {
          return ErrorAt(path, line, absl::StrCat(v.key, ": map entries must be plain key: value"));
        }
        const std::string key = kv.first.as<std::string>();
        if (absl::Status s = seen_inside.Add(path, absl::StrCat(v.key, ": "), key, key, line);
            !s.ok()) {
          return s;
        }
        pairs.push_back(absl::StrCat(key, "=", kv.second.as<std::string>()));
      }
      v.value = absl::StrJoin(pairs, ",");
    }
    values.push_back(std::move(v));
  }
  return values;
}

}  // namespace

absl::StatusOr<std::vector<ConfigValue>> LoadYamlConfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadConfigFile(path);
  if (!text.ok()) return text.status();
  try {
    return ParseConfig(path, YAML::Load(*text));
  } catch (const YAML::Exception& e) {
    return ErrorAt(path, e.mark.line + 1, e.msg);
  }
}

}  // namespace ddprun::launcher
