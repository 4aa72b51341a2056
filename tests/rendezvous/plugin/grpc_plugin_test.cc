// rendezvous/plugin: the gRPC plugin as ddprun loads it (dlopen of libddprun_grpc.so and its one
// C entry point; the static build's linked copy of the same code), driven through the plugin's
// interface with bad settings, and once through a real hosting agent on a loopback port.
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rendezvous/api/grpc_rendezvous_plugin.h"
#include "tests/testing/loop_runner.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/test_env.h"

#ifdef DDPRUN_PLUGIN_LINKED
extern "C" ddprun::launcher::GrpcRendezvousPlugin* DdprunGrpcRendezvousPlugin();
#endif

namespace ddprun::launcher {
namespace {

using ::ddprun::testing::LoopRunner;
using ::ddprun::testing::ReservedPort;
using ::ddprun::testing::TempDir;
using std::chrono::milliseconds;

GrpcPluginEntryPoint EntryPoint() {
#ifdef DDPRUN_PLUGIN_LINKED
  return &DdprunGrpcRendezvousPlugin;
#else
  static void* handle = dlopen(DDPRUN_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(handle, nullptr) << dlerror();
  if (handle == nullptr) return nullptr;
  return reinterpret_cast<GrpcPluginEntryPoint>(dlsym(handle, kGrpcPluginEntryPoint));
#endif
}

class GrpcPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DDPRUN_ETCD_PASSWORD");
    unsetenv("DDPRUN_RDZV_TOKEN");
    GrpcPluginEntryPoint entry = EntryPoint();
    ASSERT_NE(entry, nullptr) << "the plugin exports no " << kGrpcPluginEntryPoint;
    plugin_ = entry();
    ASSERT_NE(plugin_, nullptr);
    plugin_->SetVerbose(false);
  }
  void TearDown() override { unsetenv("DDPRUN_ETCD_PASSWORD"); }

  // Settings of an agent that joins a server at 127.0.0.1:`port` and never hosts.
  static C10dSettings Joining(int port) {
    C10dSettings s;
    s.run_id = "unit";
    s.endpoint_host = "127.0.0.1";
    s.endpoint_port = port;
    s.read_timeout = milliseconds(2000);
    s.rpc_timeout = milliseconds(1000);
    return s;
  }

  GrpcRendezvousPlugin* plugin_ = nullptr;
  TempDir dir_;
};

TEST_F(GrpcPluginTest, EntryPointReturnsTheSamePluginEveryTime) {
  EXPECT_EQ(EntryPoint()(), plugin_);
}

TEST_F(GrpcPluginTest, UnreadableTokenFileIsAnErrorNamingIt) {
  C10dSettings s = Joining(1);
  s.token_file = dir_.File("missing-token");
  LoopRunner runner;
  auto rdzv = plugin_->Create(s, runner.loop());
  ASSERT_FALSE(rdzv.ok());
  EXPECT_EQ(rdzv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(rdzv.status().message(),
                               absl::StrCat("token_file: cannot read ", s.token_file)))
      << rdzv.status();
  auto status = plugin_->QueryRun(s, "unit");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().message(), rdzv.status().message());
}

TEST_F(GrpcPluginTest, BinaryTokenFileIsRefusedBeforeAnythingConnects) {
  C10dSettings s = Joining(1);
  s.token_file = dir_.File("token");
  ddprun::testing::WriteFile(s.token_file, std::string("ab\0cd", 5));
  auto status = plugin_->QueryRun(s, "unit");
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.status().message(), "is not a text file"))
      << status.status();
}

TEST_F(GrpcPluginTest, TokenThatCannotTravelInAHeaderIsAnErrorNotAnAbort) {
  setenv("DDPRUN_RDZV_TOKEN", "t\xc3\xb6k", 1);  // gRPC aborts on such a metadata value
  auto status = plugin_->QueryRun(Joining(1), "unit");
  unsetenv("DDPRUN_RDZV_TOKEN");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StartsWith(status.status().message(), "DDPRUN_RDZV_TOKEN: the token has byte 0xc3"))
      << status.status();
}

TEST_F(GrpcPluginTest, TlsSettingsReachTheClientAndTheServer) {
  // The plugin's own work is mapping the agent's settings onto the client's and the server's
  // options: a file named for each side must be the one that side reads.
  C10dSettings s = Joining(1);
  s.tls_ca = dir_.File("missing-ca.pem");
  auto status = plugin_->QueryRun(s, "unit");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StartsWith(status.status().message(), absl::StrCat("TLS CA: cannot read ", s.tls_ca)))
      << status.status();

  ReservedPort port;
  ASSERT_GT(port.port(), 0);
  LoopRunner runner;
  C10dSettings host = Joining(port.port());
  host.host_here = true;
  host.must_host = true;
  host.tls_cert = dir_.File("cert.pem");  // no key
  auto rdzv = plugin_->Create(host, runner.loop());
  ASSERT_FALSE(rdzv.ok());
  EXPECT_EQ(rdzv.status().message(), "TLS needs both a certificate file and a key file");

  host.tls_cert.clear();
  host.tls_client_ca = dir_.File("clients.pem");
  rdzv = plugin_->Create(host, runner.loop());
  ASSERT_FALSE(rdzv.ok());
  EXPECT_EQ(rdzv.status().message(), "a client CA file needs a server certificate and key");
}

TEST_F(GrpcPluginTest, EtcdUserWithoutAPasswordIsAnError) {
  EtcdSettings s;
  s.endpoints = {"127.0.0.1:1"};
  s.user = "ddprun";
  LoopRunner runner;
  const std::string no_password =
      "--rdzv-conf etcd_user needs a password: set DDPRUN_ETCD_PASSWORD or --rdzv-conf "
      "etcd_password_file=FILE";
  auto rdzv = plugin_->CreateEtcd(s, runner.loop());
  ASSERT_FALSE(rdzv.ok());
  EXPECT_EQ(rdzv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rdzv.status().message(), no_password);
  setenv("DDPRUN_ETCD_PASSWORD", "", 1);  // empty counts as unset
  auto query = plugin_->QueryEtcdRun(s, "unit");
  ASSERT_FALSE(query.ok());
  EXPECT_EQ(query.status().message(), no_password);
}

TEST_F(GrpcPluginTest, EtcdPasswordFileThatGivesNoPasswordIsAnErrorNamingIt) {
  EtcdSettings s;
  s.endpoints = {"127.0.0.1:1"};
  s.user = "ddprun";
  setenv("DDPRUN_ETCD_PASSWORD", "not-used-when-a-file-is-named", 1);
  for (const std::string& contents :
       {std::string("MISSING"), std::string(""), std::string("\nsecond")}) {
    s.password_file = dir_.File("password");
    if (contents == "MISSING") {
      s.password_file = dir_.File("missing");
    } else {
      ddprun::testing::WriteFile(s.password_file, contents, 0600);
    }
    auto query = plugin_->QueryEtcdRun(s, "unit");
    ASSERT_FALSE(query.ok()) << contents;
    EXPECT_EQ(query.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(query.status().message(),
              absl::StrCat("--rdzv-conf etcd_password_file=", s.password_file,
                           ": cannot read a password from it"));
  }
}

TEST_F(GrpcPluginTest, QueryOfAnAddressWhereNothingListensFailsWithinItsDeadline) {
  ReservedPort held;  // bound, never listening: connections are refused
  ASSERT_GT(held.port(), 0);
  const auto start = std::chrono::steady_clock::now();
  auto status = plugin_->QueryRun(Joining(held.port()), "unit");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnavailable) << status.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(GrpcPluginTest, MustHostOnAPortThatCannotBeBoundIsAnError) {
  // A listener without SO_REUSEADDR's sharing: the server cannot bind its port.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  C10dSettings s = Joining(ntohs(addr.sin_port));
  s.host_here = true;
  s.must_host = true;
  LoopRunner runner;
  auto rdzv = plugin_->Create(s, runner.loop());
  close(fd);
  ASSERT_FALSE(rdzv.ok()) << "is_host=1 on a busy port must not quietly join";
  EXPECT_TRUE(absl::StrContains(rdzv.status().message(), absl::StrCat(s.endpoint_port)))
      << rdzv.status();
}

TEST_F(GrpcPluginTest, HostingAgentServesItsRunAndAnswersQueries) {
  ReservedPort port;  // held until the server binds it (both use SO_REUSEADDR)
  ASSERT_GT(port.port(), 0);
  C10dSettings s = Joining(port.port());
  s.host_here = true;
  s.must_host = true;
  LoopRunner runner;
  auto rdzv = plugin_->Create(s, runner.loop());
  ASSERT_TRUE(rdzv.ok()) << rdzv.status();
  EXPECT_TRUE((*rdzv)->hosting());
  EXPECT_EQ((*rdzv)->OtherAgents("unit"), 0) << "nobody has joined";

  // The server answers (no agent has joined, so the run does not exist yet).
  auto json = plugin_->QueryRun(Joining(port.port()), "unit");
  ASSERT_FALSE(json.ok());
  EXPECT_EQ(json.status().code(), absl::StatusCode::kNotFound) << json.status();
  EXPECT_TRUE(absl::StrContains(json.status().message(), "no run 'unit' on this server"))
      << json.status();

  // A second agent of the same host finds the port taken and joins instead of hosting.
  C10dSettings second = Joining(port.port());
  second.host_here = true;
  auto joined = plugin_->Create(second, runner.loop());
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_FALSE((*joined)->hosting());
  EXPECT_EQ((*joined)->OtherAgents("unit"), 0) << "only a hosting agent counts the others";
  joined->reset();
  rdzv->reset();
  runner.Stop();
}

}  // namespace
}  // namespace ddprun::launcher
