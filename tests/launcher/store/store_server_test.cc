// The agent's store server against the real TCPStore clients of torch 1.13 (Debian's, in
// /usr/bin/python3) and torch 2.11 (the venv; its libuv and classic settings), every operation
// each has; and against raw sockets for what no real client does (bad bytes, a taken port).
// Another user's attempt on the port: agent_store_test.cc, with real ddprun.
#include "launcher/store/store_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"
#include "tests/testing/torch2.h"

namespace ddprun::launcher::store {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<StoreServer> StartServer() {
  absl::StatusOr<std::unique_ptr<StoreServer>> s = StoreServer::Start({});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

void RunOps(const std::string& python, int port, const std::string& client_kind) {
  std::vector<std::string> argv = {python,
                                   testing::SourcePath("tests/launcher/store/store_client_ops.py"),
                                   "127.0.0.1", absl::StrCat(port)};
  if (!client_kind.empty()) argv.push_back(client_kind);
  testing::Subprocess p(argv);
  auto st = p.Wait(90s);
  ASSERT_TRUE(st.has_value()) << "timed out\n" << p.out() << p.err();
  EXPECT_EQ(st->exit_code, 0) << p.out() << p.err();
  EXPECT_NE(p.out().find("all ok"), std::string::npos) << p.out() << p.err();
}

TEST(StoreServerTest, Torch113ClientEveryOperation) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  RunOps(testing::SystemPython(), server->port(), "");
}

TEST(StoreServerTest, Torch211LibuvClientEveryOperation) {
  DDPRUN_REQUIRE_TORCH2();
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  RunOps(t2.python, server->port(), "libuv");
}

TEST(StoreServerTest, Torch211ClassicClientEveryOperation) {
  DDPRUN_REQUIRE_TORCH2();
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  RunOps(t2.python, server->port(), "classic");
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Reads exactly n bytes (or fewer at EOF/error).
std::string ReadN(int fd, size_t n) {
  std::string out;
  char buf[4096];
  while (out.size() < n) {
    const ssize_t got = read(fd, buf, std::min(sizeof(buf), n - out.size()));
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

TEST(StoreServerTest, BadBytesCloseOnlyThatConnection) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const int good = Connect(server->port());
  const int bad = Connect(server->port());
  const std::string garbage = EncodeValidation() + std::string(1, '\x63');
  ASSERT_EQ(write(bad, garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
  char c;
  EXPECT_EQ(read(bad, &c, 1), 0);  // closed by the server
  Request ping;
  ping.command = Command::kPing;
  ping.nonce = 42;
  const std::string req = EncodeValidation() + EncodeRequest(Dialect::kValidated, ping);
  ASSERT_EQ(write(good, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  EXPECT_EQ(ReadN(good, 4), EncodeUint32(42));
  close(good);
  close(bad);
}

TEST(StoreServerTest, ClearEmptiesTheStoreBeforeItReturns) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const int fd = Connect(server->port());
  Request set;
  set.command = Command::kSet;
  set.keys = {"k"};
  set.values = {"v"};
  Request count;
  count.command = Command::kNumKeys;
  std::string req = EncodeValidation() + EncodeRequest(Dialect::kValidated, set) +
                    EncodeRequest(Dialect::kValidated, count);
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  EXPECT_EQ(ReadN(fd, 8), EncodeInt64(1));
  server->Clear();
  req = EncodeRequest(Dialect::kValidated, count);
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  EXPECT_EQ(ReadN(fd, 8), EncodeInt64(0));
  close(fd);
}

TEST(StoreServerTest, AnExplicitPortInUseIsAClearError) {
  auto first = StartServer();
  ASSERT_NE(first, nullptr);
  StoreServerOptions o;
  o.port = first->port();
  absl::StatusOr<std::unique_ptr<StoreServer>> second = StoreServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(second.status().message(), absl::StrCat("port ", first->port(), " is in use"));
}

// Clients that hold connections open (anyone who reaches the port: the store has no
// authentication, as torch's) cannot take the descriptors the agent needs for its workers:
// beyond the limit less the reserve, connections are closed at once, and the store serves
// again once they go.
TEST(StoreServerTest, HeldConnectionsLeaveTheAgentItsDescriptors) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  ASSERT_GT(files.rlim_cur, 200u);
  StoreServerOptions o;
  o.reserved_descriptors = static_cast<int>(files.rlim_cur) - 70;  // room for 70 connections
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> held;
  for (int i = 0; i < 100; ++i) held.push_back(Connect((*server)->port()));
  auto closed_by_server = [&] {
    int closed = 0;
    for (int fd : held) {
      pollfd p{fd, POLLIN, 0};
      char c;
      if (poll(&p, 1, 0) == 1 && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) ++closed;
    }
    return closed;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (closed_by_server() < 30 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // no event for a peer's close
  }
  EXPECT_EQ(closed_by_server(), 30);
  for (int fd : held) close(fd);
  // The held ones gone, a client is served again (the server notices the closes first).
  bool served = false;
  while (!served && std::chrono::steady_clock::now() < deadline + std::chrono::seconds(10)) {
    const int fd = Connect((*server)->port());
    Request ping;
    ping.command = Command::kPing;
    ping.nonce = 7;
    const std::string req = EncodeValidation() + EncodeRequest(Dialect::kValidated, ping);
    served = write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()) &&
             ReadN(fd, 4) == EncodeUint32(7);
    close(fd);
  }
  EXPECT_TRUE(served);
}

}  // namespace
}  // namespace ddprun::launcher::store
