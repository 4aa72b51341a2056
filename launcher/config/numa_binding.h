// --numa-binding: each worker runs on the CPUs near its GPU, as torchrun 2.x's --numa-binding
// does, read from sysfs alone (no numactl, no NVML, no CUDA in the agent) and applied with
// sched_setaffinity between fork and exec.
//
// A GPU is an NVIDIA PCI device (vendor 0x10de, display class 0x03xx) under
// SYSFS/bus/pci/devices; GPU N is the N-th in PCI address order, which is nvidia-smi's order and
// CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID (and CUDA's default order too on machines of one GPU
// model). A worker's GPU is the local rank's entry of CUDA_VISIBLE_DEVICES when that is set
// (numbers only), else its local rank. The modes, as torch defines them:
//
//   node          every CPU of the GPU's NUMA node
//   socket        every CPU of the socket (physical package) that holds that node
//   exclusive     the node's physical cores shared out among the node's GPUs, whole cores
//                 (hyper-thread siblings together), the lower GPUs taking one extra core when
//                 they do not divide evenly
//   core-complex  one last-level cache domain (an AMD CCX, for example) of the node per GPU,
//                 largest first, reused round-robin when the node has more GPUs than domains
//
// Always within the CPUs ddprun itself may use (its affinity mask: taskset, cgroups, Slurm).
// A GPU without a NUMA node (numa_node -1, one-node machines) belongs to node 0, as in torch.
#ifndef DDPRUN_LAUNCHER_CONFIG_NUMA_BINDING_H_
#define DDPRUN_LAUNCHER_CONFIG_NUMA_BINDING_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddprun::launcher {

enum class NumaMode { kNode, kSocket, kExclusive, kCoreComplex };

// "node", "socket", "exclusive", "core-complex"; InvalidArgument otherwise.
absl::StatusOr<NumaMode> ParseNumaMode(const std::string& value);

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}, the sysfs list format.
absl::StatusOr<std::set<int>> ParseCpuList(const std::string& text);
std::string FormatCpuList(const std::set<int>& cpus);

// What --numa-binding needs to know of a machine, read once from sysfs.
class NumaTopology {
 public:
  // `sysfs_root` is "/sys" on a real machine; tests give fake trees of the same shape.
  static absl::StatusOr<NumaTopology> Read(const std::string& sysfs_root);

  int gpu_count() const { return static_cast<int>(gpu_nodes_.size()); }
  const std::vector<std::string>& gpu_addresses() const { return gpu_addresses_; }

  // The CPUs for the worker of GPU `gpu` under `mode`, within `allowed`. FailedPrecondition
  // naming the GPU when there is no such GPU or nothing is left to bind to.
  absl::StatusOr<std::set<int>> CpusFor(int gpu, NumaMode mode, const std::set<int>& allowed) const;

 private:
  std::set<int> NodeCpus(int node, const std::set<int>& allowed) const;
  std::vector<int> GpusOfNode(int node) const;
  // Groups `cpus` by a key CPU -> representative (the lowest CPU of its core or cache).
  static std::map<int, std::set<int>> GroupBy(const std::set<int>& cpus,
                                              const std::map<int, int>& representative);

  std::vector<std::string> gpu_addresses_;  // PCI order
  std::vector<int> gpu_nodes_;              // NUMA node of each GPU
  std::map<int, std::set<int>> node_cpus_;  // NUMA node -> its CPUs
  std::map<int, int> cpu_package_;          // CPU -> physical package (socket)
  std::map<int, int> cpu_core_;             // CPU -> lowest CPU of its physical core
  std::map<int, int> cpu_llc_;              // CPU -> lowest CPU sharing its last-level cache
};

// The GPU index of each local rank: the entries of `cuda_visible_devices` when it is not empty
// (InvalidArgument naming it when an entry is not a number, or there are fewer than `nproc`),
// else 0..nproc-1.
absl::StatusOr<std::vector<int>> GpuIndexOfLocalRanks(const std::string& cuda_visible_devices,
                                                      int nproc);

// The CPUs ddprun may run on (sched_getaffinity).
std::set<int> AllowedCpus();

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CONFIG_NUMA_BINDING_H_
