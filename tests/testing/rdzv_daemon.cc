#include "tests/testing/rdzv_daemon.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <regex>

#include "tests/testing/loopback.h"
#include "tests/testing/net_hosts.h"
#include "tests/testing/test_env.h"

namespace ddprun::testing {

using namespace std::chrono_literals;

RdzvDaemon::RdzvDaemon(const std::string& token, const std::string& host,
                       std::function<std::vector<std::string>(std::vector<std::string>)> wrap,
                       int port)
    : token_(token) {
  std::vector<std::string> argv = {BinPath("ddprun-rdzv"), "--port=" + std::to_string(port),
                                   "--host=" + host};
  if (wrap) argv = wrap(argv);
  daemon_ = std::make_unique<Subprocess>(
      argv, std::map<std::string, std::string>{{"DDPRUN_RDZV_TOKEN", token}});
  const std::regex re("listening on ([^\\s]+)");
  std::smatch m;
  if (daemon_->WaitForOutput([&](const std::string& s) { return std::regex_search(s, m, re); },
                             std::chrono::seconds(10))) {
    const std::string out = daemon_->out();
    std::regex_search(out, m, re);
    endpoint_ = m[1];
  }
}

std::unique_ptr<RdzvDaemon> RdzvDaemon::OnHost(const NetHosts& hosts, int host,
                                               const std::string& token, int port) {
  return std::make_unique<RdzvDaemon>(
      token, hosts.Address(host),
      [&hosts, host](std::vector<std::string> argv) { return hosts.On(host, argv); }, port);
}

std::unique_ptr<RdzvDaemon> RdzvDaemon::WithHttp(const std::string& token,
                                                 std::vector<std::string> extra) {
  auto daemon =
      std::make_unique<RdzvDaemon>(token, "127.0.0.1", [&extra](std::vector<std::string> argv) {
        argv.push_back("--http-port=0");
        argv.insert(argv.end(), extra.begin(), extra.end());
        return argv;
      });
  if (!daemon->endpoint().empty()) daemon->http_port_ = daemon->WaitForHttpPort(10s);
  return daemon;
}

std::string RdzvDaemon::Metrics() const {
  return LoopbackExchange(http_port_,
                          "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          "Authorization: Bearer " +
                              token_ + "\r\n\r\n");
}

int RdzvDaemon::WaitForHttpPort(std::chrono::milliseconds timeout) const {
  const std::regex re("http on 127\\.0\\.0\\.1:(\\d+)");
  std::smatch m;
  if (!daemon_->WaitForOutput([&](const std::string& s) { return std::regex_search(s, m, re); },
                              timeout)) {
    return 0;
  }
  const std::string out = daemon_->out();
  return std::regex_search(out, m, re) ? std::atoi(m[1].str().c_str()) : 0;
}

int RdzvDaemon::port() const {
  return endpoint_.empty() ? 0 : std::atoi(endpoint_.substr(endpoint_.rfind(':') + 1).c_str());
}

void RdzvDaemon::Kill() {
  daemon_->SignalGroup(SIGKILL);
  daemon_->Wait(std::chrono::seconds(10));
}

}  // namespace ddprun::testing
