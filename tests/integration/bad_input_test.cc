// Bad input to the real ddprun binary (issue 28): every case is refused before anything runs,
// with exit 2 and one line on stderr that names the flag, variable or file; nothing is written
// where the input pointed; ddprun never aborts on an exception.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun {
namespace {

using testing::BinPath;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::Subprocess;
using testing::TempDir;
using namespace std::chrono_literals;

// Generous for a loaded CI machine; a refused command line takes milliseconds.
constexpr auto kExitTimeout = 30s;

class BadInputTest : public ::testing::Test {
 protected:
  // Runs ddprun with `args` in the scratch folder and expects a usage error: exit 2, one line
  // "ddprun: error: ..." on stderr containing `needle`, nothing on stdout.
  void ExpectUsageError(std::vector<std::string> args, const std::string& needle,
                        std::map<std::string, std::string> env = {}) {
    SCOPED_TRACE(args.empty() ? std::string("(no args)") : args.front().substr(0, 80));
    const bool status_command = !args.empty() && args.front() == "status";
    args.insert(args.begin(), BinPath("ddprun"));
    Subprocess p(args, std::move(env), dir_.path());
    std::optional<testing::ExitStatus> status = p.Wait(kExitTimeout);
    ASSERT_TRUE(status.has_value()) << "still running; stderr: " << p.err();
    EXPECT_EQ(status->signal, 0) << p.err();
    EXPECT_EQ(status->exit_code, 2) << p.err();
    const std::string err = p.err();
    EXPECT_THAT(err, StartsWith(status_command ? "ddprun status: error: " : "ddprun: error: "));
    EXPECT_THAT(err, HasSubstr(needle));
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_LT(err.size(), 1000u) << "the message should quote a long value shortened";
    EXPECT_EQ(p.out(), "");
  }

  // A c10d job whose endpoint nobody serves, never hosted here (is_host=0): before the fixes
  // these cases failed only when the rendezvous answered, with exit 3.
  std::vector<std::string> C10d(std::vector<std::string> more,
                                const std::string& endpoint = "127.0.0.1:9") {
    std::vector<std::string> args = {"--rdzv-backend=c10d", "--nnodes=1:2",
                                     "--rdzv-endpoint=" + endpoint};
    bool has_conf = false;
    for (const std::string& a : more) has_conf |= absl::StartsWith(a, "--rdzv-conf");
    if (!has_conf) args.push_back("--rdzv-conf=is_host=0,read_timeout=2,join_timeout=5");
    args.insert(args.end(), more.begin(), more.end());
    args.insert(args.end(), {"--no-python", "/bin/true"});
    return args;
  }

  TempDir dir_;
};

// #7: "--master-addr=" took "--no-python" as the address.
TEST_F(BadInputTest, EmptyValueIsRefusedNotTakenFromTheNextArgument) {
  ExpectUsageError({"--master-addr=", "--no-python", "/bin/echo", "hi"},
                   "--master-addr=: must not be empty");
  ExpectUsageError({"--config=", "--no-python", "/bin/echo", "hi"}, "--config=");
}

// #7: "--log-dir=" made a folder named "--no-python"; an empty --log-dir is torchrun's default
// (no log folder kept).
TEST_F(BadInputTest, EmptyLogDirIsTheDefault) {
  Subprocess p({BinPath("ddprun"), "--log-dir=", "--no-python", "/bin/echo", "hi"}, {},
               dir_.path());
  std::optional<testing::ExitStatus> status = p.Wait(kExitTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->exit_code, 0) << p.err();
  EXPECT_THAT(p.out(), HasSubstr("hi"));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("--no-python")));
}

// #8: exceptions aborted ddprun (exit 134).
TEST_F(BadInputTest, ConfigThatIsADirectoryIsAUsageError) {
  ExpectUsageError({"--config=" + dir_.path(), "--no-python", "/bin/true"},
                   absl::StrCat("--config=", dir_.path(), ": is a directory"));
}

TEST_F(BadInputTest, HugeRunIdWithLogDirIsAUsageError) {
  ExpectUsageError({"--rdzv-id=" + std::string(10000, 'a'), "--log-dir=" + dir_.File("logs"),
                    "--no-python", "/bin/true"},
                   "--rdzv-id=");
}

// #9: the run id escaped --log-dir.
TEST_F(BadInputTest, RunIdCannotLeaveTheLogDir) {
  ExpectUsageError(
      {"--rdzv-id=../x/pwned", "--log-dir=" + dir_.File("a/b"), "--no-python", "/bin/true"},
      "--rdzv-id=../x/pwned");
  EXPECT_FALSE(std::filesystem::exists(dir_.File("a/x")));
  EXPECT_FALSE(std::filesystem::exists(dir_.File("a/b")));
}

// #10: 1e19 s overflowed into no grace at all.
TEST_F(BadInputTest, StopTimeoutBeyondTheBoundIsRefused) {
  ExpectUsageError({"--stop-timeout=1e19", "--no-python", "/bin/true"}, "--stop-timeout=1e19");
  ExpectUsageError({"--no-python", "/bin/true"}, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=nan",
                   {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "nan"}});
}

// #13, #15: a config file of bounded size, each flag once.
TEST_F(BadInputTest, ConfigFileSizeAndRepeatedKeys) {
  const std::string big = dir_.File("big.yaml");
  testing::WriteFile(big, "nnodes: 1\n" + std::string(4 << 20, '#') + "\n");
  ExpectUsageError({"--config", big, "--no-python", "/bin/true"},
                   absl::StrCat("--config=", big, ": larger than the limit of 1048576 bytes"));
  const std::string twice = dir_.File("twice.yaml");
  testing::WriteFile(twice, "nproc-per-node: 1\nnproc_per_node: 2\n");
  ExpectUsageError({"--config", twice, "--no-python", "/bin/true"},
                   absl::StrCat(twice, ":2: nproc_per_node is given again (first on line 1"));
}

// #16: these were read as a bare IPv6 address; ddprun hosted [::]:29400 and failed later.
TEST_F(BadInputTest, RdzvEndpointThatIsNotHostPortIsRefused) {
  // A c10d list names the job's hosts; each entry must be HOST[:PORT] and is named when not.
  for (const auto& [endpoint, named] : std::vector<std::pair<std::string, std::string>>{
           {"127.0.0.1:1:2", "127.0.0.1:1:2"},
           {"http://127.0.0.1:29400", "http://127.0.0.1:29400"},
           {"a:1,http://b:2", "http://b:2"}}) {
    ExpectUsageError(C10d({}, endpoint), "--rdzv-endpoint=" + named);
  }
}

// #17: refused late, with exit 3 and without the flag's name.
TEST_F(BadInputTest, RendezvousLimitsAreCheckedAtParseTime) {
  ExpectUsageError(C10d({"--rdzv-conf=is_host=0,keep_alive_interval=1e300"}),
                   "--rdzv-conf keep_alive_interval=1e300");
  ExpectUsageError(C10d({"--local-addr=" + std::string(1000, 'h')}), "--local-addr=");
  ExpectUsageError(C10d({"--rdzv-id=" + std::string(300, 'i')}), "at most 256 bytes");
}

// #19: a directory passed the check; every worker failed with 127 ("pid 0").
TEST_F(BadInputTest, NoPythonDirectoryIsRefused) {
  ExpectUsageError({"--no-python", dir_.path()}, dir_.path() + ": not a regular file");
}

// #20: NaN passed the range check and --watch polled without pause.
TEST_F(BadInputTest, StatusWatchIntervalMustBeFiniteAndNotTiny) {
  for (const char* interval : {"nan", "0.001", "inf", "-1"}) {
    ExpectUsageError({"status", "--watch", std::string("--interval=") + interval,
                      "--rdzv-endpoint=127.0.0.1:9", "--rdzv-id=x"},
                     "--interval");
  }
}

}  // namespace
}  // namespace ddprun
