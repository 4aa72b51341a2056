#include "tests/testing/etcd_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddprun::testing {
namespace {

std::string Find(const std::string& name) {
  for (const char* dir : {"/usr/bin/", "/usr/local/bin/"}) {
    const std::string path = std::string(dir) + name;
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

}  // namespace

std::unique_ptr<Subprocess> StartEtcdOnHost(const NetHosts& hosts, int host,
                                            const std::string& data_dir) {
  const std::string a = hosts.Address(host);
  return std::make_unique<Subprocess>(hosts.On(
      host, {"/usr/bin/etcd", "--name", "m0", "--data-dir", data_dir, "--listen-client-urls",
             "http://" + a + ":2379", "--advertise-client-urls", "http://" + a + ":2379",
             "--listen-peer-urls", "http://" + a + ":2380", "--initial-advertise-peer-urls",
             "http://" + a + ":2380", "--initial-cluster", "m0=http://" + a + ":2380"}));
}

std::string EtcdEndpointOn(const NetHosts& hosts, int host) {
  return absl::StrCat(hosts.Address(host), ":2379");
}

std::string EtcdCluster::Unavailable() {
  if (Find("etcd").empty() || Find("etcdctl").empty()) {
    return "etcd is not installed (Debian: apt-get install etcd-server etcd-client)";
  }
  return "";
}

EtcdCluster::EtcdCluster(int members, EtcdClusterTls tls) : tls_(std::move(tls)) {
  const std::string scheme = tls_.cert.empty() ? "http://" : "https://";
  std::vector<std::string> initial;
  for (int i = 0; i < members; ++i) {
    client_ports_.push_back(std::make_unique<ReservedPort>());
    peer_ports_.push_back(std::make_unique<ReservedPort>());
    initial.push_back(absl::StrCat("m", i, "=http://127.0.0.1:", peer_ports_.back()->port()));
  }
  const std::string token = absl::StrCat("ddprun-test-", getpid(), "-", client_ports_[0]->port());
  for (int i = 0; i < members; ++i) {
    const std::string client = absl::StrCat(scheme, "127.0.0.1:", client_ports_[i]->port());
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_ports_[i]->port());
    std::vector<std::string> argv = {
        Find("etcd"), "--name", absl::StrCat("m", i), "--data-dir", dir_.File(absl::StrCat("m", i)),
        "--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls",
        peer, "--initial-advertise-peer-urls", peer, "--initial-cluster",
        absl::StrJoin(initial, ","), "--initial-cluster-state", "new", "--initial-cluster-token",
        token,
        // A leader is elected, and a dead one replaced, within about half a second.
        "--heartbeat-interval", "50", "--election-timeout", "500"};
    if (!tls_.cert.empty()) {
      argv.insert(argv.end(), {"--cert-file", tls_.cert, "--key-file", tls_.key});
    }
    if (!tls_.client_ca.empty()) {
      argv.insert(argv.end(), {"--client-cert-auth", "--trusted-ca-file", tls_.client_ca});
    }
    members_.push_back(std::make_unique<Subprocess>(argv));
  }
}

EtcdCluster::~EtcdCluster() = default;

std::string EtcdCluster::endpoint(int member) const {
  return absl::StrCat("127.0.0.1:", client_ports_[member]->port());
}

std::string EtcdCluster::endpoints() const {
  std::vector<std::string> all;
  for (size_t i = 0; i < members_.size(); ++i) all.push_back(endpoint(static_cast<int>(i)));
  return absl::StrJoin(all, ",");
}

std::vector<std::string> EtcdCluster::CtlBase(const std::vector<std::string>& endpoints) const {
  std::vector<std::string> argv = {Find("etcdctl"), "--endpoints=" + absl::StrJoin(endpoints, ","),
                                   "--dial-timeout=1s", "--command-timeout=2s"};
  if (!tls_.ca.empty()) argv.push_back("--cacert=" + tls_.ca);
  if (!tls_.client_cert.empty()) {
    argv.insert(argv.end(), {"--cert=" + tls_.client_cert, "--key=" + tls_.client_key});
  }
  return argv;
}

std::string EtcdCluster::Ctl(const std::vector<std::string>& args) {
  std::vector<std::string> live;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] != nullptr) live.push_back(endpoint(static_cast<int>(i)));
  }
  std::vector<std::string> argv = CtlBase(live);
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess ctl(argv, {{"ETCDCTL_API", "3"}});
  auto st = ctl.Wait(std::chrono::seconds(10));
  if (!st.has_value() || st->exit_code != 0) return "";
  return ctl.out();
}

bool EtcdCluster::WaitHealthy(std::chrono::milliseconds timeout) {
  return WaitUntil(
      [this] {
        std::vector<std::string> live;
        for (size_t i = 0; i < members_.size(); ++i) {
          if (members_[i] != nullptr) live.push_back(endpoint(static_cast<int>(i)));
        }
        std::vector<std::string> argv = CtlBase(live);
        argv.insert(argv.end(), {"endpoint", "health"});
        Subprocess ctl(argv, {{"ETCDCTL_API", "3"}});
        auto st = ctl.Wait(std::chrono::seconds(10));
        return st.has_value() && st->exit_code == 0;
      },
      timeout);
}

int EtcdCluster::Leader() {
  // One JSON object per live endpoint: {"Endpoint":"127.0.0.1:P","Status":{"header":
  // {..."member_id":M,...},..."leader":L,...}}.
  const std::string json = Ctl({"endpoint", "status", "-w", "json"});
  const std::regex re(
      "\"Endpoint\":\"([^\"]+)\",\"Status\":\\{\"header\":\\{[^}]*\"member_id\":(\\d+)[^}]*\\}"
      "[^}]*?\"leader\":(\\d+)");
  for (std::sregex_iterator it(json.begin(), json.end(), re), end; it != end; ++it) {
    if ((*it)[2] != (*it)[3]) continue;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (endpoint(static_cast<int>(i)) == (*it)[1]) return static_cast<int>(i);
    }
  }
  return -1;
}

void EtcdCluster::Kill(int member) {
  if (members_[member] == nullptr) return;
  members_[member]->Signal(SIGKILL);
  members_[member]->Wait(std::chrono::seconds(10));
  members_[member].reset();
}

void EtcdCluster::KillAll() {
  for (size_t i = 0; i < members_.size(); ++i) Kill(static_cast<int>(i));
}

std::string EtcdCluster::log(int member) {
  return members_[member] != nullptr ? members_[member]->err() : "";
}

}  // namespace ddprun::testing
