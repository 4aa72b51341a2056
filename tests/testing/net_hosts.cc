#include "tests/testing/net_hosts.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace ddprun::testing {
namespace {

bool HaveCommand(const char* name) {
  return std::system(absl::StrCat("command -v ", name, " >/dev/null 2>&1").c_str()) == 0;
}

// Runs `command`; "" when it succeeded, else the command and what it printed.
std::string Shell(const std::string& command) {
  std::string out;
  if (FILE* p = popen((command + " 2>&1").c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    if (pclose(p) == 0) return "";
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return absl::StrCat("failed: ", command, ": ", out);
}

}  // namespace

std::string NetHosts::Unavailable() {
  if (geteuid() != 0) return "multi-host tests need root (network namespaces)";
  if (!HaveCommand("ip")) return "iproute2's ip is not installed";
  if (!HaveCommand("unshare")) return "util-linux's unshare is not installed";
  const std::string probe = absl::StrCat("ddprun-probe-", getpid());
  if (std::system(absl::StrCat("ip netns add ", probe, " >/dev/null 2>&1 && ip netns del ", probe,
                               " >/dev/null 2>&1")
                      .c_str()) != 0) {
    return "this machine refuses network namespaces (ip netns add failed)";
  }
  return "";
}

namespace {

// Namespaces left by a harness whose process was killed (its destructor never ran): removed,
// so that they do not pile up across killed test runs.
void RemoveStaleNamespaces() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = e.path().filename();
    int pid = 0;
    if (sscanf(name.c_str(), "ddprun-%d-", &pid) != 1 || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // its owner is alive
    std::system(absl::StrCat("ip netns del ", name, " 2>/dev/null").c_str());
  }
}

}  // namespace

NetHosts::NetHosts(int n) : n_(n), prefix_(absl::StrCat("ddprun-", getpid())) {
  RemoveStaleNamespaces();
  Run(absl::StrCat("ip netns add ", SwitchNs()));
  Run(absl::StrCat("ip -n ", SwitchNs(), " link add br0 type bridge"));
  Run(absl::StrCat("ip -n ", SwitchNs(), " link set br0 up"));
  for (int h = 1; h <= n_; ++h) {
    const std::string ns = Ns(h);
    const std::string port = absl::StrCat("p", h);
    Run(absl::StrCat("ip netns add ", ns));
    Run(absl::StrCat("ip -n ", ns, " link set lo up"));
    // The pair is made in the host's namespace; one end moves to the switch.
    Run(absl::StrCat("ip -n ", ns, " link add eth0 type veth peer name ", port));
    Run(absl::StrCat("ip -n ", ns, " link set ", port, " netns ", SwitchNs()));
    Run(absl::StrCat("ip -n ", SwitchNs(), " link set ", port, " master br0"));
    Run(absl::StrCat("ip -n ", SwitchNs(), " link set ", port, " up"));
    Run(absl::StrCat("ip -n ", ns, " addr add ", Address(h), "/24 dev eth0"));
    Run(absl::StrCat("ip -n ", ns, " link set eth0 up"));
  }
}

NetHosts::~NetHosts() {
  relays_.clear();
  for (int h = 1; h <= n_; ++h) {
    std::system(absl::StrCat("ip netns del ", Ns(h), " >/dev/null 2>&1").c_str());
  }
  std::system(absl::StrCat("ip netns del ", SwitchNs(), " >/dev/null 2>&1").c_str());
}

bool NetHosts::Run(const std::string& command) {
  if (!error_.empty()) return false;
  if (std::system((command + " 2>&1 >/dev/null").c_str()) != 0) {
    error_ = absl::StrCat("failed: ", command);
    return false;
  }
  return true;
}

std::string NetHosts::Ns(int host) const { return absl::StrCat(prefix_, "-h", host); }
std::string NetHosts::Address(int host) const { return absl::StrCat("10.213.0.", host); }
std::string NetHosts::Name(int host) const { return absl::StrCat("n", host); }

std::vector<std::string> NetHosts::On(int host, const std::vector<std::string>& argv) const {
  // ip and unshare exec what follows: the process started is the program itself.
  std::vector<std::string> out = {"ip",      "netns",   "exec",
                                  Ns(host),  "unshare", "--uts",
                                  "/bin/sh", "-c",      "hostname \"$0\" && exec \"$@\"",
                                  Name(host)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

void NetHosts::Cut(int host) {
  Run(absl::StrCat("ip -n ", SwitchNs(), " link set p", host, " down"));
}

void NetHosts::Heal(int host) {
  Run(absl::StrCat("ip -n ", SwitchNs(), " link set p", host, " up"));
}

absl::StatusOr<std::string> NetHosts::Impair(int host, const std::string& netem_args,
                                             Impairer how) {
  absl::StatusOr<LinkImpairment> impairment = ParseNetemArgs(netem_args);
  if (!impairment.ok()) return impairment.status();
  std::string netem_error;
  if (how != Impairer::kRelay) {
    netem_error =
        Shell(absl::StrCat("tc -n ", Ns(host), " qdisc add dev eth0 root netem ", netem_args));
    if (netem_error.empty()) return std::string("netem");
    if (how == Impairer::kNetem) {
      return absl::UnavailableError(absl::StrCat(
          netem_error,
          " (a kernel without sch_netem, CONFIG_NET_SCH_NETEM, cannot do it: the user-space "
          "relay can)"));
    }
  }
  // The host's end of the switch (pN) leaves the bridge; a new pair (xN, wN) takes its place
  // there, and the relay copies frames between pN and xN: host -> bridge impaired.
  const std::string sw = SwitchNs();
  for (const std::string& command :
       {absl::StrCat("ip -n ", sw, " link set p", host, " nomaster"),
        absl::StrCat("ip -n ", sw, " link add name x", host, " type veth peer name w", host),
        absl::StrCat("ip -n ", sw, " link set w", host, " master br0"),
        absl::StrCat("ip -n ", sw, " link set w", host, " up"),
        absl::StrCat("ip -n ", sw, " link set x", host, " up")}) {
    if (std::string e = Shell(command); !e.empty()) return absl::UnavailableError(e);
  }
  absl::StatusOr<std::unique_ptr<FrameRelay>> relay =
      FrameRelay::Start(absl::StrCat("/run/netns/", sw), absl::StrCat("p", host),
                        absl::StrCat("x", host), *impairment, LinkImpairment{},
                        static_cast<uint64_t>(getpid()) * 1000 + static_cast<uint64_t>(host));
  if (!relay.ok()) return relay.status();
  relays_[host] = std::move(*relay);
  return std::string("relay");
}

std::optional<FrameRelay::Counts> NetHosts::ImpairedCounts(int host) const {
  auto it = relays_.find(host);
  if (it == relays_.end()) return std::nullopt;
  return it->second->a_to_b();
}

std::vector<FrameRelay::UdpFlow> NetHosts::UdpFlowsTo(int host) const {
  auto it = relays_.find(host);
  if (it == relays_.end()) return {};
  return it->second->UdpFlowsToA();
}

bool NetHosts::RelaysRealtime() const {
  for (const auto& [host, relay] : relays_) {
    if (!relay->realtime()) return false;
  }
  return true;
}

std::string NetHosts::LimitRate(int host, const std::string& rate) {
  // A bucket of 64 KiB: a few frames' burst, so the rate holds over a probe of 200 ms. The
  // latency bound keeps the queue short (packets beyond it are dropped, as a slow link does).
  const std::string tbf = absl::StrCat(" root tbf rate ", rate, " burst 64kb latency 50ms");
  for (const std::string& command :
       {absl::StrCat("tc -n ", Ns(host), " qdisc add dev eth0", tbf),
        absl::StrCat("tc -n ", SwitchNs(), " qdisc add dev p", host, tbf)}) {
    if (std::string e = Shell(command); !e.empty()) return e;
  }
  return "";
}

std::string NetHosts::ClearRate(int host) {
  for (const std::string& command :
       {absl::StrCat("tc -n ", Ns(host), " qdisc del dev eth0 root"),
        absl::StrCat("tc -n ", SwitchNs(), " qdisc del dev p", host, " root")}) {
    if (std::string e = Shell(command); !e.empty()) return e;
  }
  return "";
}

void NetHosts::AddAddress(int host, const std::string& cidr) {
  Run(absl::StrCat("ip -n ", Ns(host), " addr add ", cidr, " dev eth0"));
}

}  // namespace ddprun::testing
