// Where the tests find the built binaries, the source tree and scratch space.
#ifndef DDPRUN_TESTS_TESTING_TEST_ENV_H_
#define DDPRUN_TESTS_TESTING_TEST_ENV_H_

#include <string>

namespace ddprun::testing {

// build/bin/<name>; DDPRUN_BIN_DIR overrides the build's own bin folder.
std::string BinPath(const std::string& name);
// A file in the source tree; DDPRUN_SOURCE_DIR overrides the tree this was built from.
std::string SourcePath(const std::string& relative);
// A fresh empty directory, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);
// Everything read from `fd` (a pipe, a socket) until end of file, an error or its receive
// timeout.
std::string ReadUntilEof(int fd);
void WriteFile(const std::string& path, const std::string& contents, int mode = 0644);
// DIR/NAME, a /bin/sh script of `body`, executable; returns its path.
std::string WriteShellScript(const TempDir& dir, const std::string& name, const std::string& body);
// How many times `pattern` (a std::regex) matches in `text`.
int CountMatches(const std::string& text, const std::string& pattern);
// How many times `needle` occurs in `text`, literally.
int CountOccurrences(const std::string& text, const std::string& needle);
// Where two texts first differ, for a failure message: "line N: <expected line> != <actual line>"
// (or which one is longer); empty when they are equal.
std::string FirstDifference(const std::string& expected, const std::string& actual);
// tests/integration/scripts/<name> in the source tree.
std::string IntegrationScript(const std::string& name);
// The one RUN_ID folder ddprun made under a --log-dir (empty: none yet).
std::string RunDir(const std::string& log_dir);
// The Python interpreter that has Debian's torch (python3-torch installs for /usr/bin/python3).
std::string SystemPython();

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_TEST_ENV_H_
