#include "tests/testing/test_cgroup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace ddprun::testing {
namespace {

bool WriteSysFile(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace

TestCgroup::TestCgroup(Controller controller, const std::string& name) {
  const std::string hierarchy = controller == Controller::kMemory ? "memory" : "cpu";
  const std::string probe =
      controller == Controller::kMemory ? "/memory.limit_in_bytes" : "/cpu.cfs_quota_us";
  v1_ = access(("/sys/fs/cgroup/" + hierarchy + probe).c_str(), F_OK) == 0;
  if (!v1_) WriteSysFile("/sys/fs/cgroup/cgroup.subtree_control", "+" + hierarchy);
  const std::string dir =
      v1_ ? absl::StrCat("/sys/fs/cgroup/", hierarchy, "/", name) : "/sys/fs/cgroup/" + name;
  if (mkdir(dir.c_str(), 0755) != 0) {
    error_ = absl::StrCat("mkdir ", dir, ": ", strerror(errno));
    return;
  }
  dir_ = dir;
}

TestCgroup::~TestCgroup() {
  if (!dir_.empty()) rmdir(dir_.c_str());
}

bool TestCgroup::Set(const std::string& v1_file, const std::string& v2_file,
                     const std::string& value, const std::string& v2_value) {
  if (dir_.empty()) return false;
  const std::string file = dir_ + "/" + (v1_ ? v1_file : v2_file);
  if (WriteSysFile(file, !v1_ && !v2_value.empty() ? v2_value : value)) return true;
  error_ = absl::StrCat("write ", file, ": ", strerror(errno));
  return false;
}

void TestCgroup::SetIfPresent(const std::string& v1_file, const std::string& v2_file,
                              const std::string& v1_value, const std::string& v2_value) {
  if (dir_.empty()) return;
  const std::string file = dir_ + "/" + (v1_ ? v1_file : v2_file);
  if (access(file.c_str(), F_OK) == 0) WriteSysFile(file, v1_ ? v1_value : v2_value);
}

bool TestCgroup::LimitCpu(int percent) {
  const std::string quota = std::to_string(percent * 1000);  // of a 100,000 us period
  return Set("cpu.cfs_period_us", "cpu.max", "100000", quota + " 100000") &&
         (!v1_ || Set("cpu.cfs_quota_us", "", quota));
}

}  // namespace ddprun::testing
