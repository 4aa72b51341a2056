// LoadGrpcRendezvousPlugin of the static build (DDPRUN_STATIC, launcher/rdzv/CMakeLists.txt):
// a static executable cannot dlopen, so the plugin's code is linked into ddprun and its entry
// point is called directly. The dynamic build uses grpc_plugin_loader.cc instead.
#include "common/log.h"
#include "rendezvous/api/grpc_rendezvous_plugin.h"

// Defined in rendezvous/plugin/grpc_rendezvous_plugin.cc (kGrpcPluginEntryPoint).
extern "C" ddprun::launcher::GrpcRendezvousPlugin* DdprunGrpcRendezvousPlugin();

namespace ddprun::launcher {

absl::StatusOr<GrpcRendezvousPlugin*> LoadGrpcRendezvousPlugin() {
  GrpcRendezvousPlugin* plugin = DdprunGrpcRendezvousPlugin();
  plugin->SetVerbose(Verbose());
  return plugin;
}

}  // namespace ddprun::launcher
