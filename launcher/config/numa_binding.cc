#include "launcher/config/numa_binding.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_text.h"

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

// The first line of a small sysfs file, trimmed; "" when it cannot be read.
std::string ReadLine(const fs::path& path) {
  const std::string text = ReadTextFile(path.string());
  return std::string(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
}

// Entries of `dir` whose names are `prefix` followed by a number, by that number.
std::map<int, fs::path> Numbered(const fs::path& dir, const std::string& prefix) {
  std::map<int, fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int n = 0;
    if (name.rfind(prefix, 0) == 0 && absl::SimpleAtoi(name.substr(prefix.size()), &n)) {
      out[n] = entry.path();
    }
  }
  return out;
}

// The lowest CPU of a sysfs CPU list, or `fallback` when it is empty or unreadable.
int LowestOf(const fs::path& list_file, int fallback) {
  auto cpus = ParseCpuList(ReadLine(list_file));
  return cpus.ok() && !cpus->empty() ? *cpus->begin() : fallback;
}

// The lowest CPU sharing `cpu_dir`'s highest-level data or unified cache.
int LastLevelCacheOf(const fs::path& cpu_dir, int cpu) {
  int best_level = -1;
  int representative = cpu;
  for (const auto& [index, dir] : Numbered(cpu_dir / "cache", "index")) {
    const std::string type = ReadLine(dir / "type");
    if (type != "Unified" && type != "Data") continue;
    int level = 0;
    if (!absl::SimpleAtoi(ReadLine(dir / "level"), &level) || level <= best_level) continue;
    best_level = level;
    representative = LowestOf(dir / "shared_cpu_list", cpu);
  }
  return representative;
}

}  // namespace

absl::StatusOr<NumaMode> ParseNumaMode(const std::string& value) {
  if (value == "node") return NumaMode::kNode;
  if (value == "socket") return NumaMode::kSocket;
  if (value == "exclusive") return NumaMode::kExclusive;
  if (value == "core-complex") return NumaMode::kCoreComplex;
  return absl::InvalidArgumentError("must be node, socket, exclusive or core-complex");
}

absl::StatusOr<std::set<int>> ParseCpuList(const std::string& text) {
  std::set<int> cpus;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<std::string, std::string> range = absl::StrSplit(item, absl::MaxSplits('-', 1));
    int first = 0, last = 0;
    const bool is_range = item.find('-') != absl::string_view::npos;
    if (!absl::SimpleAtoi(range.first, &first) ||
        !absl::SimpleAtoi(is_range ? range.second : range.first, &last) || first < 0 ||
        last < first) {
      return absl::InvalidArgumentError(absl::StrCat("not a CPU list: '", text, "'"));
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.insert(cpu);
  }
  return cpus;
}

std::string FormatCpuList(const std::set<int>& cpus) {
  std::vector<std::string> ranges;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    while (++it != cpus.end() && *it == last + 1) ++last;
    ranges.push_back(first == last ? absl::StrCat(first) : absl::StrCat(first, "-", last));
  }
  return absl::StrJoin(ranges, ",");
}

absl::StatusOr<NumaTopology> NumaTopology::Read(const std::string& sysfs_root) {
  const fs::path root(sysfs_root);
  NumaTopology t;
  // GPUs: NVIDIA display-class PCI functions, in address order ("0000:18:00.0" sorts by domain,
  // bus, device, function as text: the fields are fixed-width hex).
  std::vector<std::string> addresses;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root / "bus/pci/devices", ec)) {
    const std::string vendor = ReadLine(entry.path() / "vendor");
    const std::string pci_class = ReadLine(entry.path() / "class");
    if (vendor == "0x10de" && pci_class.rfind("0x03", 0) == 0) {
      addresses.push_back(entry.path().filename().string());
    }
  }
  std::sort(addresses.begin(), addresses.end());
  for (const std::string& address : addresses) {
    int node = -1;
    if (!absl::SimpleAtoi(ReadLine(root / "bus/pci/devices" / address / "numa_node"), &node)) {
      node = -1;
    }
    t.gpu_addresses_.push_back(address);
    t.gpu_nodes_.push_back(std::max(node, 0));  // -1: a machine of one node
  }
  for (const auto& [node, dir] : Numbered(root / "devices/system/node", "node")) {
    auto cpus = ParseCpuList(ReadLine(dir / "cpulist"));
    if (!cpus.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat((dir / "cpulist").string(), ": ", cpus.status().message()));
    }
    t.node_cpus_[node] = *std::move(cpus);
  }
  for (const auto& [cpu, dir] : Numbered(root / "devices/system/cpu", "cpu")) {
    int package = 0;
    if (!absl::SimpleAtoi(ReadLine(dir / "topology/physical_package_id"), &package)) package = 0;
    t.cpu_package_[cpu] = package;
    t.cpu_core_[cpu] = LowestOf(dir / "topology/thread_siblings_list", cpu);
    t.cpu_llc_[cpu] = LastLevelCacheOf(dir, cpu);
  }
  if (t.node_cpus_.empty()) {
    // A kernel without NUMA support shows no node folder: every CPU is on node 0.
    for (const auto& [cpu, package] : t.cpu_package_) t.node_cpus_[0].insert(cpu);
  }
  return t;
}

std::set<int> NumaTopology::NodeCpus(int node, const std::set<int>& allowed) const {
  std::set<int> out;
  auto it = node_cpus_.find(node);
  if (it == node_cpus_.end()) return out;
  std::set_intersection(it->second.begin(), it->second.end(), allowed.begin(), allowed.end(),
                        std::inserter(out, out.end()));
  return out;
}

std::vector<int> NumaTopology::GpusOfNode(int node) const {
  std::vector<int> gpus;
  for (int g = 0; g < gpu_count(); ++g) {
    if (gpu_nodes_[g] == node) gpus.push_back(g);
  }
  return gpus;
}

std::map<int, std::set<int>> NumaTopology::GroupBy(const std::set<int>& cpus,
                                                   const std::map<int, int>& representative) {
  std::map<int, std::set<int>> groups;
  for (int cpu : cpus) {
    auto it = representative.find(cpu);
    groups[it == representative.end() ? cpu : it->second].insert(cpu);
  }
  return groups;
}

absl::StatusOr<std::set<int>> NumaTopology::CpusFor(int gpu, NumaMode mode,
                                                    const std::set<int>& allowed) const {
  if (gpu < 0 || gpu >= gpu_count()) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", gpu, " is not on this machine (", gpu_count(),
                     " NVIDIA GPU(s) under /sys/bus/pci/devices)"));
  }
  const int node = gpu_nodes_[gpu];
  std::set<int> cpus;
  switch (mode) {
    case NumaMode::kNode:
      cpus = NodeCpus(node, allowed);
      break;
    case NumaMode::kSocket: {
      const std::set<int> own = NodeCpus(node, allowed);
      if (own.empty()) break;
      const int package = cpu_package_.count(*own.begin()) ? cpu_package_.at(*own.begin()) : 0;
      // Every node whose (lowest allowed) CPU sits on the same package.
      for (const auto& [other, unused] : node_cpus_) {
        const std::set<int> theirs = NodeCpus(other, allowed);
        if (theirs.empty()) continue;
        auto it = cpu_package_.find(*theirs.begin());
        if ((it == cpu_package_.end() ? 0 : it->second) == package) {
          cpus.insert(theirs.begin(), theirs.end());
        }
      }
      break;
    }
    case NumaMode::kExclusive: {
      const std::vector<int> gpus = GpusOfNode(node);
      const int index = static_cast<int>(std::find(gpus.begin(), gpus.end(), gpu) - gpus.begin());
      const std::map<int, std::set<int>> cores = GroupBy(NodeCpus(node, allowed), cpu_core_);
      const int per_gpu = static_cast<int>(cores.size() / gpus.size());
      const int extra = static_cast<int>(cores.size() % gpus.size());
      if (per_gpu < 1) {
        return absl::FailedPreconditionError(
            absl::StrCat("NUMA node ", node, " has ", cores.size(), " physical core(s) for ",
                         gpus.size(), " GPUs: --numa-binding=exclusive needs one core per GPU"));
      }
      const int start = index * per_gpu + std::min(index, extra);
      const int end = start + per_gpu + (index < extra ? 1 : 0);
      int i = 0;
      for (const auto& [core, threads] : cores) {
        if (i >= start && i < end) cpus.insert(threads.begin(), threads.end());
        ++i;
      }
      break;
    }
    case NumaMode::kCoreComplex: {
      const std::vector<int> gpus = GpusOfNode(node);
      const int index = static_cast<int>(std::find(gpus.begin(), gpus.end(), gpu) - gpus.begin());
      std::vector<std::set<int>> complexes;
      for (auto& [representative, members] : GroupBy(NodeCpus(node, allowed), cpu_llc_)) {
        complexes.push_back(members);
      }
      if (complexes.empty()) break;
      // The largest first, then the lowest CPU (as torch orders them).
      std::stable_sort(
          complexes.begin(), complexes.end(), [](const std::set<int>& a, const std::set<int>& b) {
            return a.size() != b.size() ? a.size() > b.size() : *a.begin() < *b.begin();
          });
      cpus = complexes[index % complexes.size()];
      break;
    }
  }
  if (cpus.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU ", gpu, " (", gpu_addresses_[gpu], ") is on NUMA node ", node,
        ", none of whose CPUs ddprun may use (its affinity: ", FormatCpuList(allowed), ")"));
  }
  return cpus;
}

absl::StatusOr<std::vector<int>> GpuIndexOfLocalRanks(const std::string& cuda_visible_devices,
                                                      int nproc) {
  std::vector<int> gpus;
  if (cuda_visible_devices.empty()) {
    for (int i = 0; i < nproc; ++i) gpus.push_back(i);
    return gpus;
  }
  for (absl::string_view entry :
       absl::StrSplit(cuda_visible_devices, ',', absl::SkipWhitespace())) {
    int gpu = 0;
    if (!absl::SimpleAtoi(entry, &gpu) || gpu < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--numa-binding: CUDA_VISIBLE_DEVICES=", cuda_visible_devices, ": '", entry,
          "' is not a GPU number (GPU UUIDs and MIG names cannot be placed from sysfs)"));
    }
    gpus.push_back(gpu);
  }
  if (static_cast<int>(gpus.size()) < nproc) {
    return absl::InvalidArgumentError(
        absl::StrCat("--numa-binding: CUDA_VISIBLE_DEVICES=", cuda_visible_devices, " lists ",
                     gpus.size(), " GPU(s) for ", nproc, " workers (--nproc-per-node)"));
  }
  gpus.resize(nproc);
  return gpus;
}

std::set<int> AllowedCpus() {
  std::set<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.insert(cpu);
  }
  return cpus;
}

}  // namespace ddprun::launcher
