#include "launcher/config/rdzv_backend.h"

#include <string>

#include "absl/strings/ascii.h"

namespace ddprun::launcher {

absl::string_view RdzvBackendName(RdzvBackend backend) {
  switch (backend) {
    case RdzvBackend::kStatic:
      return "static";
    case RdzvBackend::kC10d:
      return "c10d";
    case RdzvBackend::kEtcd:
      return "etcd";
    case RdzvBackend::kEtcdV3:
      return "etcd-v3";
  }
  return "static";  // not reached: every enumerator is named above
}

std::optional<RdzvBackend> ParseRdzvBackend(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "static") return RdzvBackend::kStatic;
  if (n == "c10d") return RdzvBackend::kC10d;
  if (n == "etcd" || n == "etcd-v2") return RdzvBackend::kEtcd;
  if (n == "etcd-v3") return RdzvBackend::kEtcdV3;
  return std::nullopt;
}

}  // namespace ddprun::launcher
