// A cgroup of a test's own, made in one controller's hierarchy and removed with the object: the
// v1 hierarchy where the controller is mounted on its own (this machine's), else v2 (the
// controller enabled in the root's subtree_control). A process writes its pid to procs() to move
// in; its children are born there. Root only.
#ifndef DDPRUN_TESTS_TESTING_TEST_CGROUP_H_
#define DDPRUN_TESTS_TESTING_TEST_CGROUP_H_

#include <string>

namespace ddprun::testing {

class TestCgroup {
 public:
  enum class Controller { kMemory, kCpu };

  // `name`: unique on the machine (the test's pid in it); error() says what failed.
  TestCgroup(Controller controller, const std::string& name);
  ~TestCgroup();
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;

  // Writes `value` to the controller's file: `v1_file` in a v1 hierarchy, `v2_file` in v2 (the
  // other's value where given, else `value`). False, with error() set, when it cannot.
  bool Set(const std::string& v1_file, const std::string& v2_file, const std::string& value,
           const std::string& v2_value = "");
  // The same where the file exists; nothing where it does not (swap accounting).
  void SetIfPresent(const std::string& v1_file, const std::string& v2_file,
                    const std::string& v1_value, const std::string& v2_value);
  // At most `percent` of one CPU: cfs quota (v1) or cpu.max (v2), on a 100 ms period.
  bool LimitCpu(int percent);

  bool v1() const { return v1_; }
  const std::string& error() const { return error_; }
  std::string procs() const { return dir_ + "/cgroup.procs"; }
  // Its path within the hierarchy, without the leading '/'.
  std::string name() const { return dir_.substr(dir_.rfind('/') + 1); }

 private:
  bool v1_ = false;
  std::string dir_;
  std::string error_;
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_TEST_CGROUP_H_
