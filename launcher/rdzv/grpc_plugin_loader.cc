#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/env_variables.h"
#include "common/log.h"
#include "rendezvous/api/grpc_rendezvous_plugin.h"

namespace ddprun::launcher {

absl::StatusOr<GrpcRendezvousPlugin*> LoadGrpcRendezvousPlugin() {
  std::string path = ReadProcessVariable(kGrpcPluginVariable);
  if (path.empty()) {
    char exe[PATH_MAX] = {};
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return absl::InternalError("cannot find the ddprun executable's folder");
    // The same layout in the build tree (build/bin, build/lib/ddprun) and in an installed
    // prefix (/usr/bin, /usr/lib/ddprun): found relative to this executable, never a build path.
    const std::filesystem::path bin_dir = std::filesystem::path(std::string(exe, n)).parent_path();
    path = (bin_dir / kGrpcPluginRelativePath).lexically_normal().string();
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the gRPC rendezvous plugin ", path, ": ", dlerror()));
  }
  auto entry = reinterpret_cast<GrpcPluginEntryPoint>(dlsym(handle, kGrpcPluginEntryPoint));
  if (entry == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": no symbol ", kGrpcPluginEntryPoint));
  }
  GrpcRendezvousPlugin* plugin = entry();
  plugin->SetVerbose(Verbose());
  return plugin;
}

}  // namespace ddprun::launcher
