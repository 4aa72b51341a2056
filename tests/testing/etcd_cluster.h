// EtcdCluster: a real etcd cluster (Debian's etcd-server) of N members on loopback for tests,
// data in a TempDir. Ports are held by ReservedPort (bound with SO_REUSEADDR, never listening)
// for the cluster's lifetime and etcd binds them too, so no other process can take them between
// choosing and binding. Short heartbeat and election timeouts keep failover tests fast.
#ifndef DDPRUN_TESTS_TESTING_ETCD_CLUSTER_H_
#define DDPRUN_TESTS_TESTING_ETCD_CLUSTER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/net_hosts.h"
#include "tests/testing/reserved_port.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::testing {

// The members' client-side TLS (PEM files); all empty: plaintext.
struct EtcdClusterTls {
  std::string cert, key;  // set: clients reach the members over TLS only (https URLs)
  std::string ca;         // what etcdctl trusts
  // Set: clients must present a certificate this CA signed (mutual TLS); etcdctl presents
  // client_cert/client_key.
  std::string client_ca, client_cert, client_key;
};

// A one-member etcd on `host` of `hosts`, at etcd's fixed ports (the namespace is the test's own),
// its data in `data_dir`; clients reach it at EtcdEndpointOn(hosts, host).
std::unique_ptr<Subprocess> StartEtcdOnHost(const NetHosts& hosts, int host,
                                            const std::string& data_dir);
std::string EtcdEndpointOn(const NetHosts& hosts, int host);

class EtcdCluster {
 public:
  // Empty when /usr/bin/etcd and etcdctl are there; else why the tests must skip.
  static std::string Unavailable();

  explicit EtcdCluster(int members = 3, EtcdClusterTls tls = {});
  ~EtcdCluster();  // SIGKILLs the members (Subprocess)

  // Waits until every live member answers a health check (a committed proposal).
  bool WaitHealthy(std::chrono::milliseconds timeout);
  // The index of the member that is the raft leader, per the live members; -1 if none agree.
  int Leader();
  void Kill(int member);
  void KillAll();
  bool alive(int member) const { return members_[member] != nullptr; }

  // "127.0.0.1:p0,127.0.0.1:p1,..." (every member, dead or alive).
  std::string endpoints() const;
  std::string endpoint(int member) const;
  // Runs etcdctl (v3 API) against the live members; its stdout, or "" on failure.
  std::string Ctl(const std::vector<std::string>& args);
  std::string log(int member);

 private:
  std::vector<std::string> CtlBase(const std::vector<std::string>& endpoints) const;

  const EtcdClusterTls tls_;
  TempDir dir_;
  std::vector<std::unique_ptr<ReservedPort>> client_ports_, peer_ports_;
  std::vector<std::unique_ptr<Subprocess>> members_;
};

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_ETCD_CLUSTER_H_
