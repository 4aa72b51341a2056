#include "tests/testing/test_env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace ddprun::testing {

namespace {
std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}
}  // namespace

std::string BinPath(const std::string& name) {
  return EnvOr("DDPRUN_BIN_DIR", DDPRUN_DEFAULT_BIN_DIR) + "/" + name;
}

std::string SourcePath(const std::string& relative) {
  return EnvOr("DDPRUN_SOURCE_DIR", DDPRUN_DEFAULT_SOURCE_DIR) + "/" + relative;
}

TempDir::TempDir() {
  std::string tmpl = EnvOr("TMPDIR", "/tmp") + "/ddprun-test-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadUntilEof(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

void WriteFile(const std::string& path, const std::string& contents, int mode) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << contents;
  }
  chmod(path.c_str(), mode);
}

std::string WriteShellScript(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.File(name);
  WriteFile(path, "#!/bin/sh\n" + body, 0755);
  return path;
}

std::string SystemPython() { return EnvOr("DDPRUN_TEST_PYTHON", "/usr/bin/python3"); }

std::string RunDir(const std::string& log_dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(log_dir, ec)) {
    if (e.is_directory()) return e.path().string();
  }
  return "";
}

std::string IntegrationScript(const std::string& name) {
  return SourcePath("tests/integration/scripts/" + name);
}

int CountMatches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

int CountOccurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

std::string FirstDifference(const std::string& expected, const std::string& actual) {
  if (expected == actual) return "";
  std::istringstream a(expected), b(actual);
  std::string x, y;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(a, x));
    const bool more_b = static_cast<bool>(std::getline(b, y));
    if (!more_a || !more_b || x != y) {
      return "line " + std::to_string(line) + ": expected \"" + (more_a ? x : "(end)") +
             "\"\n  but got \"" + (more_b ? y : "(end)") + "\"";
    }
  }
}

}  // namespace ddprun::testing
