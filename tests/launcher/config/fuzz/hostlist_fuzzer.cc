// libFuzzer target for the Slurm hostlist parser: any input must give an expansion or an
// InvalidArgument status (never a crash, a hang or an unbounded allocation), and an accepted
// list must survive FormatHostlist -> ExpandHostlist unchanged. Build and run with
// tests/launcher/config/fuzz/run_fuzzer.sh (clang only).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "launcher/config/hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  auto hosts = ddprun::launcher::ExpandHostlist(input);
  if (!hosts.ok()) {
    if (hosts.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (hosts->size() > ddprun::launcher::kMaxHostlistHosts) std::abort();
  auto first = ddprun::launcher::FirstHost(input);
  if (!first.ok() || *first != hosts->front()) std::abort();
  auto again = ddprun::launcher::ExpandHostlist(ddprun::launcher::FormatHostlist(*hosts));
  if (!again.ok() || *again != *hosts) std::abort();
  return 0;
}
