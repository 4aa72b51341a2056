// A fake /sys tree of a GPU machine, shaped as the kernel shows one (the files --numa-binding
// reads: PCI devices, NUMA nodes, CPU topology and caches), for tests on a machine without
// those GPUs or sockets.
#ifndef DDPRUN_TESTS_TESTING_FAKE_SYSFS_H_
#define DDPRUN_TESTS_TESTING_FAKE_SYSFS_H_

#include <string>
#include <vector>

namespace ddprun::testing {

struct FakeMachine {
  struct Node {
    int socket = 0;
    std::vector<int> cores;  // first hardware thread of each physical core
    int smt_offset = 0;      // a core's sibling is core + smt_offset (0: no SMT)
    int cores_per_llc = 0;   // cores sharing one last-level cache (0: the whole node)
  };
  std::vector<Node> nodes;
  // PCI address ("0000:18:00.0") and NUMA node (-1: none) of each NVIDIA GPU.
  std::vector<std::pair<std::string, int>> gpus;
  // Other PCI functions that are not GPUs (a NIC, an NVMe drive), to be ignored.
  std::vector<std::string> other_devices;
};

// Writes `machine` under `root` (root/bus/pci/devices, root/devices/system/{node,cpu}).
void WriteFakeSysfs(const std::string& root, const FakeMachine& machine);

// A DGX-H100-like machine: 2 sockets of 56 cores with SMT (CPUs 0-111 and siblings 112-223),
// one NUMA node per socket with one L3 each, 8 GPUs, 4 per node.
FakeMachine TwoSocketEightGpuIntel();
// An AMD-EPYC-like machine: 2 sockets, 2 NUMA nodes per socket (NPS2) of 16 cores with SMT
// (CPUs 0-63, siblings 64-127), an L3 (a core complex) per 8 cores, 8 GPUs, 2 per node.
FakeMachine TwoSocketEightGpuAmd();

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_FAKE_SYSFS_H_
