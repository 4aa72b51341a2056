// The table of DDPRUN_* variables (common/env_variables.h) against the source tree and the
// reference page: no variable is read or set in production code by a name spelled outside the
// table, every variable the Python modules, scripts and packaging read is in it, every entry is
// still used, and docs/reference/environment.md is what the table generates.
#include "common/env_variables.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

// The folders of production code (tests/ and bench/ are not).
const std::vector<std::string> kCodeFolders = {"common", "control",    "launcher",
                                               "python", "rendezvous", "trainer"};

// How a variable's name appears where a program reads or sets it, per kind of file; group 1 is
// the name. C++ and Python: a string literal that is the whole name (a mention in a help text or
// a comment is no read). Shell, systemd units: an expansion. CMake: $ENV{...}.
struct Pattern {
  std::vector<std::string> folders;
  std::vector<std::string> suffixes;
  std::string regex;
};
const Pattern kCxx{kCodeFolders, {".cc", ".h"}, R"re("(DDPRUN_[A-Z0-9_]+)")re"};
const Pattern kPython{
    {"common", "control", "launcher", "python", "rendezvous", "scripts", "trainer"},
    {".py"},
    R"re(b?["'](DDPRUN_[A-Z0-9_]+)["'])re"};
const Pattern kShell{{"scripts", "packaging"}, {".sh", ".in"}, R"re(\$\{?(DDPRUN_[A-Z0-9_]+))re"};
const Pattern kCmake{{"cmake"}, {".cmake"}, R"re(\$ENV\{(DDPRUN_[A-Z0-9_]+)\})re"};

// Every (file relative to the source root, text) of `folders` whose name ends in a suffix.
std::map<std::string, std::string> Files(const std::vector<std::string>& folders,
                                         const std::vector<std::string>& suffixes) {
  std::map<std::string, std::string> out;
  const fs::path root = testing::SourcePath("");
  for (const std::string& folder : folders) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      if (!entry.is_regular_file()) continue;
      const std::string path = entry.path().string();
      for (const std::string& suffix : suffixes) {
        if (absl::EndsWith(path, suffix)) {
          out[fs::relative(entry.path(), root).string()] = testing::ReadFile(path);
        }
      }
    }
  }
  return out;
}

// name -> the files that name it as `p` says.
std::map<std::string, std::set<std::string>> Uses(const Pattern& p) {
  std::map<std::string, std::set<std::string>> out;
  const std::regex re(p.regex);
  for (const auto& [file, text] : Files(p.folders, p.suffixes)) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
         ++it) {
      out[(*it)[1].str()].insert(file);
    }
  }
  return out;
}

bool IsTableFile(const std::string& file) {
  return file == "common/env_variables.h" || file == "common/env_variables.cc";
}

std::set<std::string> TableNames() {
  std::set<std::string> out;
  for (const EnvVariable& v : DdprunVariables()) out.insert(v.name);
  return out;
}

// The constant that names a variable in C++: DDPRUN_RDZV_TOKEN -> kRdzvTokenVariable.
std::string ConstantOf(const std::string& name) {
  std::string out = "k";
  for (absl::string_view word : absl::StrSplit(name.substr(strlen("DDPRUN_")), '_')) {
    absl::StrAppend(&out, absl::AsciiStrToUpper(word.substr(0, 1)),
                    absl::AsciiStrToLower(word.substr(1)));
  }
  return out + "Variable";
}

TEST(EnvVariablesTest, ProductionCodeNamesVariablesOnlyThroughTheTable) {
  for (const auto& [name, files] : Uses(kCxx)) {
    for (const std::string& file : files) {
      EXPECT_TRUE(IsTableFile(file))
          << file << " spells out \"" << name << "\": read or set it through " << ConstantOf(name)
          << " of common/env_variables.h (add it there if it is new)";
    }
  }
}

TEST(EnvVariablesTest, EveryVariableTheScriptsAndModulesReadIsInTheTable) {
  const std::set<std::string> table = TableNames();
  for (const Pattern* p : {&kPython, &kShell, &kCmake}) {
    for (const auto& [name, files] : Uses(*p)) {
      EXPECT_EQ(table.count(name), 1u)
          << name << " (read in " << *files.begin()
          << ") is not in common/env_variables.h, so not in docs/reference/environment.md";
    }
  }
}

TEST(EnvVariablesTest, EveryVariableOfTheTableIsUsed) {
  std::set<std::string> used;
  for (const Pattern* p : {&kPython, &kShell, &kCmake}) {
    for (const auto& [name, files] : Uses(*p)) used.insert(name);
  }
  std::string code;
  for (const auto& [file, text] : Files(kCodeFolders, {".cc", ".h"})) {
    if (!IsTableFile(file)) code += text;
  }
  for (const EnvVariable& v : DdprunVariables()) {
    const bool in_cxx = code.find(ConstantOf(v.name)) != std::string::npos;
    EXPECT_TRUE(in_cxx || used.count(v.name) > 0)
        << v.name << " is in the table (and the reference page) but nothing reads or sets it";
  }
}

TEST(EnvVariablesTest, TheReferencePageIsWhatTheTableGenerates) {
  const std::string committed =
      testing::ReadFile(testing::SourcePath("docs/reference/environment.md"));
  const std::string generated = EnvironmentReferenceMarkdown();
  EXPECT_TRUE(committed == generated)
      << "docs/reference/environment.md is not what common/env_variables.h generates ("
      << testing::FirstDifference(generated, committed)
      << "): run `make flag-reference` and commit the result";
}

TEST(EnvVariablesTest, ReadVariableGivesTheValueOrWhatUnsetMeans) {
  EXPECT_EQ(ReadVariable({}, kKernelLogVariable), "/dev/kmsg");
  EXPECT_EQ(ReadVariable({{"DDPRUN_KERNEL_LOG", "/tmp/k"}}, kKernelLogVariable), "/tmp/k");
  EXPECT_EQ(ReadVariable({{"DDPRUN_KERNEL_LOG", ""}}, kKernelLogVariable), "");
  EXPECT_EQ(ReadVariable({}, kRdzvTokenVariable), "");
}

}  // namespace
}  // namespace ddprun
