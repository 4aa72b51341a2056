// The installed layout, as `cmake --install` (and the .deb, which CPack stages the same way)
// lays it out: real installs into a scratch prefix, the installed programs run as real processes.
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Result {
  ExitStatus status;
  std::string out, err;
};

// Runs argv to completion (60 s at most) with the extra environment.
Result RunToEnd(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) {
  env.emplace("DDPRUN_GRPC_PLUGIN", "\x01unset");  // the installed layout alone decides
  Subprocess p(std::move(argv), env);
  std::optional<ExitStatus> st = p.Wait(60s);
  EXPECT_TRUE(st.has_value()) << "still running after 60 s";
  return {st.value_or(ExitStatus{}), p.out(), p.err()};
}

bool OnPath(const std::string& program) {
  return RunToEnd({"sh", "-c", "command -v " + program}).status.exit_code == 0;
}

// One install shared by the cases: copying the binaries takes seconds.
class PackagingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new TempDir();
    const Result r =
        RunToEnd({DDPRUN_CMAKE_COMMAND, "--install", DDPRUN_BUILD_DIR, "--prefix", Prefix()});
    install_log_ = new std::string(r.out + r.err);
    install_ok_ = r.status.exit_code == 0;
  }
  static void TearDownTestSuite() {
    delete root_;
    delete install_log_;
  }
  void SetUp() override { ASSERT_TRUE(install_ok_) << *install_log_; }

  static std::string Prefix() { return root_->path() + "/usr-local"; }
  static std::string Installed(const std::string& relative) { return Prefix() + "/" + relative; }
  static std::vector<std::string> Programs() {
    std::vector<std::string> out = {"ddprun", "ddprun-rdzv"};
    if (std::filesystem::exists(BinPath("ddp-train"))) out.push_back("ddp-train");
    return out;
  }

  static TempDir* root_;
  static std::string* install_log_;
  static bool install_ok_;
};
TempDir* PackagingTest::root_ = nullptr;
std::string* PackagingTest::install_log_ = nullptr;
bool PackagingTest::install_ok_ = false;

TEST_F(PackagingTest, InstallsEveryPieceWhereTheLayoutSays) {
  std::vector<std::string> expected = {
      "lib/ddprun/libddprun_grpc.so",
      "share/ddprun/plot_metrics.py",
      "share/ddprun/examples/allreduce_demo.py",
      "share/ddprun/configs/sbatch-2node-4gpu.sh",
      "share/ddprun/configs/elastic-c10d.yaml",
      "share/ddprun/python/ddprun_inprocess.py",
      "share/doc/ddprun/README.md",
      "share/doc/ddprun/design.md",
      "share/doc/ddprun/docs/guide/install.md",  // README.md's links, at their paths
      "share/doc/ddprun/docs/troubleshooting.md",
      "share/doc/ddprun/docs/images/status-page.png",
      "share/bash-completion/completions/ddprun",
      "share/zsh/vendor-completions/_ddprun",
      "lib/systemd/system/ddprun-rdzv.service",
      "etc/default/ddprun-rdzv",
  };
  for (const std::string& p : Programs()) {
    expected.push_back("bin/" + p);
    expected.push_back("share/man/man1/" + p + ".1.gz");
  }
  for (const std::string& f : expected) {
    EXPECT_TRUE(std::filesystem::is_regular_file(Installed(f))) << f << " missing";
  }
  for (const std::string& p : Programs()) {
    struct stat st {};
    ASSERT_EQ(stat(Installed("bin/" + p).c_str(), &st), 0);
    EXPECT_TRUE(st.st_mode & S_IXOTH) << p << " is not executable by everyone";
  }
  // The drop-in for `python -m torch.distributed.launch`: a relative link to ddprun.
  std::error_code ec;
  EXPECT_EQ(std::filesystem::read_symlink(Installed("bin/ddprun-launch"), ec), "ddprun")
      << ec.message();
}

TEST_F(PackagingTest, TheInstalledAgentFindsItsPluginFromItsOwnFolder) {
  ReservedPort port;
  const Result r =
      RunToEnd({Installed("bin/ddprun"), "--nnodes=1", "--rdzv-backend=c10d",
                absl::StrCat("--rdzv-endpoint=127.0.0.1:", port.port()), "--rdzv-conf=is_host=1",
                "--nproc-per-node=2", "--no-python", "/bin/true"});
  EXPECT_EQ(r.status.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("round 1: starting 2 worker(s)"));
}

TEST_F(PackagingTest, QuietReachesThePluginsLogLinesToo) {
  ReservedPort port;
  const Result r =
      RunToEnd({Installed("bin/ddprun"), "--quiet", "--nnodes=1", "--rdzv-backend=c10d",
                absl::StrCat("--rdzv-endpoint=127.0.0.1:", port.port()), "--rdzv-conf=is_host=1",
                "--no-python", "/bin/true"});
  EXPECT_EQ(r.status.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // no "hosting the rendezvous", no "round 1 formed"
}

TEST_F(PackagingTest, WithoutThePluginAC10dJobNamesTheFileAndExits3WhileStandaloneRuns) {
  const std::string plugin = Installed("lib/ddprun/libddprun_grpc.so");
  const std::string aside = plugin + ".aside";
  std::filesystem::rename(plugin, aside);
  ReservedPort port;
  const Result c10d = RunToEnd({Installed("bin/ddprun"), "--nnodes=1", "--rdzv-backend=c10d",
                                absl::StrCat("--rdzv-endpoint=127.0.0.1:", port.port()),
                                "--no-python", "/bin/true"});
  const Result standalone = RunToEnd(
      {Installed("bin/ddprun"), "--standalone", "--nproc-per-node=2", "--no-python", "/bin/true"});
  const Result status =
      RunToEnd({Installed("bin/ddprun"), "status",
                absl::StrCat("--rdzv-endpoint=127.0.0.1:", port.port()), "--rdzv-id=none"});
  std::filesystem::rename(aside, plugin);

  EXPECT_EQ(c10d.status.exit_code, 3) << c10d.err;
  EXPECT_EQ(c10d.status.signal, 0);
  // The path looked for, normalised (no bin/../): what an admin can check with ls.
  EXPECT_THAT(c10d.err, HasSubstr("cannot load the gRPC rendezvous plugin " + plugin + ":"));
  EXPECT_EQ(standalone.status.exit_code, 0) << standalone.err;
  EXPECT_EQ(status.status.signal, 0);
  EXPECT_NE(status.status.exit_code, 0);
  EXPECT_THAT(status.err, HasSubstr(plugin));
}

TEST_F(PackagingTest, EveryProgramPrintsTheProjectVersion) {
  for (const std::string& p : Programs()) {
    const Result r = RunToEnd({Installed("bin/" + p), "--version"});
    EXPECT_EQ(r.status.exit_code, 0) << p << ": " << r.err;
    // ddp-train also names the torch its LibTorch came from (the ddprun_train wheel's check).
    const std::string expected = p == "ddp-train"
                                     ? absl::StrCat(p, " ", kVersion, " (built for torch 1.13.")
                                     : absl::StrCat(p, " ", kVersion, "\n");
    EXPECT_THAT(r.out, StartsWith(expected));
  }
}

// Every --flag that `argv --help` prints.
std::set<std::string> FlagsOfHelp(const std::vector<std::string>& argv) {
  const Result r = RunToEnd(argv);
  EXPECT_EQ(r.status.exit_code, 0) << absl::StrJoin(argv, " ") << ": " << r.err;
  std::set<std::string> flags;
  const std::regex flag("--[a-z][a-z0-9_-]*[a-z0-9]");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), flag);
       it != std::sregex_iterator(); ++it) {
    flags.insert(it->str());
  }
  return flags;
}

TEST_F(PackagingTest, ManPagesRenderCleanlyAndCoverEveryFlagOfHelp) {
  if (!OnPath("man")) GTEST_SKIP() << "man-db is not installed (scripts/install-deps.sh)";
  std::map<std::string, std::vector<std::string>> subcommands = {
      {"ddprun", {"status"}}, {"ddp-train", {"mnist", "imagenet"}}};
  for (const std::string& p : Programs()) {
    const std::string page = Installed("share/man/man1/" + p + ".1.gz");
    ASSERT_TRUE(std::filesystem::exists(page)) << page;
    // --warnings: groff complains about bad escapes and macros; none may appear.
    const Result man =
        RunToEnd({"man", "--warnings", "-l", page}, {{"MANWIDTH", "200"}, {"LC_ALL", "C"}});
    EXPECT_EQ(man.status.exit_code, 0) << man.err;
    EXPECT_EQ(man.err, "") << p;
    EXPECT_THAT(man.out, HasSubstr(absl::StrCat(p, " ", kVersion)));
    std::set<std::string> flags = FlagsOfHelp({Installed("bin/" + p), "--help"});
    for (const std::string& sub : subcommands[p]) {
      const std::set<std::string> more = FlagsOfHelp({Installed("bin/" + p), sub, "--help"});
      flags.insert(more.begin(), more.end());
    }
    EXPECT_GT(flags.size(), 5u) << p;
    for (const std::string& f : flags) {
      EXPECT_THAT(man.out, HasSubstr(f)) << "man " << p << " lacks " << f;
    }
  }
}

// The installed bash completion, asked what it offers after `words` (the last one is the word
// being completed), in a folder with one script and one folder.
std::vector<std::string> BashOffers(const std::string& completion,
                                    const std::vector<std::string>& words) {
  TempDir cwd;
  WriteFile(cwd.File("train.py"), "");
  std::filesystem::create_directory(cwd.File("logs"));
  std::vector<std::string> quoted;
  for (const std::string& w : words) quoted.push_back("'" + w + "'");
  const std::string script =
      absl::StrCat("cd '", cwd.path(), "' && source '", completion, "' && COMP_WORDS=(",
                   absl::StrJoin(quoted, " "), ") && COMP_CWORD=", words.size() - 1,
                   " && _ddprun && printf '%s\\n' \"${COMPREPLY[@]}\" | sort");
  const Result r = RunToEnd({"bash", "-c", script});
  EXPECT_EQ(r.status.exit_code, 0) << r.err;
  std::vector<std::string> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

TEST_F(PackagingTest, BashCompletionOffersFlagsChoicesAndTheScriptsFiles) {
  using ::testing::ElementsAre;
  using ::testing::IsEmpty;
  const std::string c = Installed("share/bash-completion/completions/ddprun");
  EXPECT_THAT(BashOffers(c, {"ddprun", "--rdzv-b"}), ElementsAre("--rdzv-backend"));
  EXPECT_THAT(BashOffers(c, {"ddprun", "--nproc_per"}), ElementsAre("--nproc_per_node"));
  EXPECT_THAT(BashOffers(c, {"ddprun", "--rdzv-backend", "=", ""}),
              ElementsAre("c10d", "etcd", "etcd-v3", "static"));
  EXPECT_THAT(BashOffers(c, {"ddprun", "--rdzv-backend", "e"}), ElementsAre("etcd", "etcd-v3"));
  EXPECT_THAT(BashOffers(c, {"ddprun", "--nnodes", "=", "2", "--log-dir", ""}),
              ElementsAre("logs"));
  EXPECT_THAT(BashOffers(c, {"ddprun", "--nnodes", ""}), IsEmpty());  // a number: no guess
  EXPECT_THAT(BashOffers(c, {"ddprun", "--standalone", "tr"}), ElementsAre("train.py"));
  EXPECT_THAT(BashOffers(c, {"ddprun", "st"}), ElementsAre("status"));
  // After the script, its own flags are not ddprun's.
  EXPECT_THAT(BashOffers(c, {"ddprun", "--standalone", "train.py", "--rdz"}), IsEmpty());
}

TEST_F(PackagingTest, ZshCompletionParsesAndNamesEveryFlag) {
  if (!OnPath("zsh")) GTEST_SKIP() << "zsh is not installed (scripts/install-deps.sh)";
  const std::string c = Installed("share/zsh/vendor-completions/_ddprun");
  const Result syntax = RunToEnd({"zsh", "-n", c});
  EXPECT_EQ(syntax.status.exit_code, 0) << syntax.err;
  const std::string text = ReadFile(c);
  EXPECT_THAT(text, StartsWith("#compdef ddprun\n"));
  for (const std::string& f : FlagsOfHelp({Installed("bin/ddprun"), "--help"})) {
    EXPECT_THAT(text, HasSubstr("'" + f)) << f;
  }
  EXPECT_THAT(text, HasSubstr("'--rdzv-backend=[Rendezvous backend"));
  EXPECT_THAT(text, HasSubstr(":value:(static c10d etcd etcd-v3)'"));
}

TEST_F(PackagingTest, PrintCompletionRefusesAnUnknownShell) {
  const Result r = RunToEnd({Installed("bin/ddprun"), "--print-completion=fish"});
  EXPECT_EQ(r.status.exit_code, 2);
  EXPECT_EQ(r.err, "ddprun: error: --print-completion=fish: expected bash or zsh\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(PackagingTest, TheServiceUnitVerifiesAndNamesTheInstalledFiles) {
  const std::string unit = Installed("lib/systemd/system/ddprun-rdzv.service");
  const std::string text = ReadFile(unit);
  EXPECT_THAT(text, HasSubstr("ExecStart=" + Installed("bin/ddprun-rdzv") + " "));
  EXPECT_THAT(text, HasSubstr("EnvironmentFile=" + Installed("etc/default/ddprun-rdzv") + "\n"));
  EXPECT_THAT(text, HasSubstr("LoadCredential=token:" + Installed("etc/ddprun/rdzv-token")));
  EXPECT_THAT(text, HasSubstr("--token-file=%d/token"));
  EXPECT_THAT(text, HasSubstr("Restart=always\n"));
  if (!OnPath("systemd-analyze")) GTEST_SKIP() << "systemd-analyze is not installed";
  // verify also runs `man ddprun-rdzv` for Documentation=man:...: the installed page answers.
  const Result r =
      RunToEnd({"systemd-analyze", "verify", unit}, {{"MANPATH", Installed("share/man")}});
  EXPECT_EQ(r.status.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST_F(PackagingTest, InstallingAgainKeepsTheAdminsSettings) {
  const std::string settings = Installed("etc/default/ddprun-rdzv");
  const std::string shipped = ReadFile(SourcePath("packaging/ddprun-rdzv.default"));
  EXPECT_EQ(ReadFile(settings), shipped);
  const std::string edited = shipped + "DDPRUN_RDZV_HOST=10.0.0.7\n";
  WriteFile(settings, edited);
  const Result again =
      RunToEnd({DDPRUN_CMAKE_COMMAND, "--install", DDPRUN_BUILD_DIR, "--prefix", Prefix()});
  EXPECT_EQ(again.status.exit_code, 0) << again.err;
  EXPECT_EQ(ReadFile(settings), edited);
  WriteFile(settings, shipped);
}

}  // namespace
}  // namespace ddprun::testing
