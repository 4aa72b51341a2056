#include "tests/testing/rdzv_daemon.h"

#include <signal.h>

#include <chrono>
#include <regex>

#include "tests/testing/test_env.h"

namespace ddprun::testing {

RdzvDaemon::RdzvDaemon(const std::string& token, const std::string& host,
                       std::function<std::vector<std::string>(std::vector<std::string>)> wrap,
                       int port) {
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

void RdzvDaemon::Kill() {
  daemon_->SignalGroup(SIGKILL);
  daemon_->Wait(std::chrono::seconds(10));
}

}  // namespace ddprun::testing
