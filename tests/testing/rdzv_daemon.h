// A ddprun-rdzv daemon of a test's own: loopback (or `host`), port 0, the endpoint read from
// its "listening on" line; killed with the object.
#ifndef DDPRUN_TESTS_TESTING_RDZV_DAEMON_H_
#define DDPRUN_TESTS_TESTING_RDZV_DAEMON_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/subprocess.h"

namespace ddprun::testing {

class NetHosts;

class RdzvDaemon {
 public:
  // ddprun-rdzv on host `host` of `hosts`, bound to that host's address.
  static std::unique_ptr<RdzvDaemon> OnHost(const NetHosts& hosts, int host,
                                            const std::string& token, int port = 0);
  // ddprun-rdzv on loopback serving /metrics and its status page too (--http-port=0, then
  // `extra` flags); http_port() says where (0: it did not say within 10 s).
  static std::unique_ptr<RdzvDaemon> WithHttp(const std::string& token,
                                              std::vector<std::string> extra = {});

  // `wrap` turns the daemon's argv into the one to start (NetHosts::On, to run it on a host).
  // `port` 0: the kernel picks one (a restarted server passes the old one).
  explicit RdzvDaemon(
      const std::string& token, const std::string& host = "127.0.0.1",
      std::function<std::vector<std::string>(std::vector<std::string>)> wrap = nullptr,
      int port = 0);
  // "127.0.0.1:PORT"; empty when the daemon did not come up within 10 s (then `error()` says
  // what it printed).
  const std::string& endpoint() const { return endpoint_; }
  // The port of endpoint(); 0 when it did not come up.
  int port() const;
  // Started with --http-port=0: the port of its "http on 127.0.0.1:PORT" line, once it said it
  // (waiting up to `timeout`); 0 when it did not.
  int WaitForHttpPort(std::chrono::milliseconds timeout) const;
  int http_port() const { return http_port_; }
  // GET /metrics from a daemon started WithHttp, with its bearer token: the whole HTTP response
  // ("" when it did not answer).
  std::string Metrics() const;
  std::string error() const { return daemon_->err(); }
  std::string output() const { return daemon_->out(); }
  // SIGKILL, as a crash would; returns once it is gone.
  void Kill();

 private:
  std::unique_ptr<Subprocess> daemon_;
  std::string endpoint_;
  std::string token_;
  int http_port_ = 0;
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_RDZV_DAEMON_H_
