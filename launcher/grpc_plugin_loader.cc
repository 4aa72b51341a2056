#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "launcher/grpc_rendezvous_plugin.h"

namespace ddprun::launcher {

absl::StatusOr<GrpcRendezvousPlugin*> LoadGrpcRendezvousPlugin() {
  std::string path;
  if (const char* env = getenv("DDPRUN_GRPC_PLUGIN"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    char exe[PATH_MAX] = {};
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) return absl::InternalError("cannot find the ddprun executable's folder");
    std::string dir(exe, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    path = absl::StrCat(dir, "/../lib/libddprun_grpc.so");
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
  return entry();
}

}  // namespace ddprun::launcher
