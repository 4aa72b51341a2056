#include "tests/testing/fake_sysfs.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddprun::testing {
namespace {

namespace fs = std::filesystem;

void Put(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text << "\n";
}

std::string List(const std::set<int>& cpus) { return absl::StrJoin(cpus, ","); }

}  // namespace

void WriteFakeSysfs(const std::string& root_dir, const FakeMachine& machine) {
  const fs::path root(root_dir);
  for (const auto& [address, node] : machine.gpus) {
    const fs::path dev = root / "bus/pci/devices" / address;
    Put(dev / "vendor", "0x10de");
    Put(dev / "class", "0x030200");  // 3D controller
    Put(dev / "numa_node", absl::StrCat(node));
  }
  for (const std::string& address : machine.other_devices) {
    const fs::path dev = root / "bus/pci/devices" / address;
    Put(dev / "vendor", "0x15b3");  // a Mellanox NIC
    Put(dev / "class", "0x020000");
    Put(dev / "numa_node", "0");
  }
  Put(root / "devices/system/node/possible", absl::StrCat("0-", machine.nodes.size() - 1));
  for (size_t n = 0; n < machine.nodes.size(); ++n) {
    const FakeMachine::Node& node = machine.nodes[n];
    std::set<int> node_cpus;
    for (size_t c = 0; c < node.cores.size(); ++c) {
      const int core = node.cores[c];
      std::set<int> threads = {core};
      if (node.smt_offset > 0) threads.insert(core + node.smt_offset);
      node_cpus.insert(threads.begin(), threads.end());
      // The cores sharing this core's last-level cache.
      const size_t per = node.cores_per_llc > 0 ? node.cores_per_llc : node.cores.size();
      const size_t first = c / per * per;
      std::set<int> llc;
      for (size_t o = first; o < std::min(first + per, node.cores.size()); ++o) {
        llc.insert(node.cores[o]);
        if (node.smt_offset > 0) llc.insert(node.cores[o] + node.smt_offset);
      }
      for (int cpu : threads) {
        const fs::path dir = root / "devices/system/cpu" / absl::StrCat("cpu", cpu);
        Put(dir / "topology/physical_package_id", absl::StrCat(node.socket));
        Put(dir / "topology/thread_siblings_list", List(threads));
        // L1 data and instruction, L2 per core; L3 shared as the machine says.
        const struct {
          const char* level;
          const char* type;
          const std::set<int>& shared;
        } caches[] = {{"1", "Data", threads},
                      {"1", "Instruction", threads},
                      {"2", "Unified", threads},
                      {"3", "Unified", llc}};
        for (size_t i = 0; i < std::size(caches); ++i) {
          const fs::path cache = dir / "cache" / absl::StrCat("index", i);
          Put(cache / "level", caches[i].level);
          Put(cache / "type", caches[i].type);
          Put(cache / "shared_cpu_list", List(caches[i].shared));
        }
      }
    }
    Put(root / "devices/system/node" / absl::StrCat("node", n) / "cpulist", List(node_cpus));
  }
}

FakeMachine TwoSocketEightGpuIntel() {
  FakeMachine m;
  for (int socket = 0; socket < 2; ++socket) {
    FakeMachine::Node node;
    node.socket = socket;
    for (int c = 0; c < 56; ++c) node.cores.push_back(socket * 56 + c);
    node.smt_offset = 112;
    m.nodes.push_back(node);
  }
  m.gpus = {{"0000:18:00.0", 0}, {"0000:2a:00.0", 0}, {"0000:3a:00.0", 0}, {"0000:5d:00.0", 0},
            {"0000:9a:00.0", 1}, {"0000:ab:00.0", 1}, {"0000:ba:00.0", 1}, {"0000:db:00.0", 1}};
  m.other_devices = {"0000:17:00.0", "0000:99:00.0"};
  return m;
}

FakeMachine TwoSocketEightGpuAmd() {
  FakeMachine m;
  for (int n = 0; n < 4; ++n) {
    FakeMachine::Node node;
    node.socket = n / 2;
    for (int c = 0; c < 16; ++c) node.cores.push_back(n * 16 + c);
    node.smt_offset = 64;
    node.cores_per_llc = 8;
    m.nodes.push_back(node);
  }
  // Listed out of PCI order on purpose: GPU N is the N-th by address.
  m.gpus = {{"0000:e1:00.0", 3}, {"0000:01:00.0", 0}, {"0000:41:00.0", 1}, {"0000:21:00.0", 0},
            {"0000:61:00.0", 1}, {"0000:81:00.0", 2}, {"0000:a1:00.0", 2}, {"0000:c1:00.0", 3}};
  return m;
}

}  // namespace ddprun::testing
