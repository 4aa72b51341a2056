// TLS and mutual TLS between RendezvousServer and RendezvousClient, with certificates made by
// openssl for this test: a TLS client is served, a plaintext client is not; with a client CA the
// server also refuses clients without a certificate.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/grpc/rendezvous_server.h"
#include "tests/rendezvous/grpc/test_agent.h"
#include "tests/testing/test_env.h"

namespace ddprun::rendezvous {
namespace {

using ::ddprun::rendezvous::testing::FastClientOptions;
using ::ddprun::rendezvous::testing::MakeNode;
using ::ddprun::rendezvous::testing::TestAgent;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kWait = seconds(10);

class RendezvousTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "the openssl command (Debian package openssl) makes this test's certificates";
    }
    const std::string script =
        "set -e\n"
        "cd \"$(dirname \"$0\")\"\n"
        "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'\n"
        "openssl req -x509 $K -keyout ca.key -out ca.crt -subj /CN=test-ca -days 1\n"
        "for n in server client; do\n"
        "  openssl req $K -keyout $n.key -out $n.csr -subj /CN=$n\n"
        "  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > $n.ext\n"
        "  openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \\\n"
        "    -extfile $n.ext -out $n.crt\n"
        "done\n";
    ddprun::testing::WriteFile(dir_.File("make_certs.sh"), script);
    const std::string command = "bash " + dir_.File("make_certs.sh") + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << "openssl failed:\n" << script;
  }

  std::unique_ptr<RendezvousServer> StartServer(bool require_client_cert) {
    ServerOptions options;
    options.tls.cert_file = dir_.File("server.crt");
    options.tls.key_file = dir_.File("server.key");
    if (require_client_cert) options.tls.client_ca_file = dir_.File("ca.crt");
    auto server = RendezvousServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  ClientOptions Options(const RendezvousServer& server, bool tls, bool client_cert) {
    ClientOptions o = FastClientOptions(server.address(), "");
    o.read_timeout = milliseconds(1500);
    if (tls) o.tls.ca_file = dir_.File("ca.crt");
    if (client_cert) {
      o.tls.cert_file = dir_.File("client.crt");
      o.tls.key_file = dir_.File("client.key");
    }
    return o;
  }

  ddprun::testing::TempDir dir_;
};

TEST_F(RendezvousTlsTest, TlsClientIsServedPlaintextClientIsNot) {
  auto server = StartServer(false);
  ASSERT_NE(server, nullptr);
  TestAgent tls(Options(*server, true, false), MakeNode("run", "a", 1, 1));
  ASSERT_TRUE(tls.recorder.WaitAssignment(0, kWait).has_value());

  TestAgent plain(Options(*server, false, false), MakeNode("run2", "b", 1, 1));
  std::optional<absl::Status> closed = plain.recorder.WaitClosed(kWait);
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->code(), absl::StatusCode::kUnavailable) << *closed;
}

TEST_F(RendezvousTlsTest, MutualTlsRequiresAClientCertificate) {
  auto server = StartServer(true);
  ASSERT_NE(server, nullptr);
  TestAgent with_cert(Options(*server, true, true), MakeNode("run", "a", 1, 1));
  ASSERT_TRUE(with_cert.recorder.WaitAssignment(0, kWait).has_value());

  TestAgent without(Options(*server, true, false), MakeNode("run2", "b", 1, 1));
  std::optional<absl::Status> closed = without.recorder.WaitClosed(kWait);
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->code(), absl::StatusCode::kUnavailable) << *closed;
}

// Sets or unsets a variable for one test (each test runs in a process of its own), and restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Without a CA file, TLS clients trust OpenSSL's SSL_CERT_FILE, then SSL_CERT_DIR (gRPC alone
// ignores both; the static build, whose OpenSSL looks in the build host's folder, needs them).
TEST_F(RendezvousTlsTest, WithoutACaFileTheClientTrustsSslCertFileThenSslCertDir) {
  auto server = StartServer(false);
  ASSERT_NE(server, nullptr);
  ScopedEnv no_grpc_roots("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", nullptr);
  ClientOptions o = Options(*server, false, false);
  o.tls.required = true;
  {
    ScopedEnv file("SSL_CERT_FILE", dir_.File("ca.crt").c_str());
    TestAgent agent(o, MakeNode("run", "a", 1, 1));
    ASSERT_TRUE(agent.recorder.WaitAssignment(0, kWait).has_value());
  }
  std::filesystem::create_directory(dir_.File("certs"));
  std::filesystem::copy_file(dir_.File("ca.crt"), dir_.File("certs/ca.pem"));
  const std::string folders = "/nonexistent:" + dir_.File("certs");
  ScopedEnv no_file("SSL_CERT_FILE", nullptr);
  ScopedEnv folder("SSL_CERT_DIR", folders.c_str());
  TestAgent agent(o, MakeNode("run2", "b", 1, 1));
  ASSERT_TRUE(agent.recorder.WaitAssignment(0, kWait).has_value());
}

TEST_F(RendezvousTlsTest, AnSslCertFileThatIsNotThereIsNamed) {
  auto server = StartServer(false);
  ASSERT_NE(server, nullptr);
  ScopedEnv no_grpc_roots("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", nullptr);
  ScopedEnv file("SSL_CERT_FILE", "/nonexistent/ca.pem");
  ClientOptions o = Options(*server, false, false);
  o.tls.required = true;
  TestAgent agent(o, MakeNode("run", "a", 1, 1));
  std::optional<absl::Status> closed = agent.recorder.WaitClosed(kWait);
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->code(), absl::StatusCode::kInvalidArgument) << *closed;
  EXPECT_THAT(std::string(closed->message()),
              ::testing::AllOf(::testing::StartsWith("SSL_CERT_FILE: "),
                               ::testing::HasSubstr("/nonexistent/ca.pem")));
}

TEST(RendezvousTlsOptionsTest, BadTlsFilesAreInvalidArgument) {
  ServerOptions options;
  options.tls.cert_file = "/nonexistent/server.crt";
  options.tls.key_file = "/nonexistent/server.key";
  EXPECT_EQ(RendezvousServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.tls.key_file.clear();
  EXPECT_EQ(RendezvousServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ddprun::rendezvous
