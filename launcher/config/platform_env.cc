#include "launcher/config/platform_env.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/env_variables.h"
#include "common/status_macros.h"
#include "common/strings.h"

namespace ddprun::launcher {
namespace {

const std::string* Set(const Environment& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

constexpr char kIgnoreHint[] = "--no-platform-env or DDPRUN_NO_PLATFORM=1 ignores it";

absl::Status Platform(absl::Status s) {
  return absl::InvalidArgumentError(
      absl::StrCat(s.message(), " (platform environment; ", kIgnoreHint, ")"));
}

}  // namespace

absl::StatusOr<std::optional<PlatformPlan>> PlanPlatform(
    const Environment& env, const std::vector<FlagValue>& explicit_flags) {
  const std::string* addr = Set(env, "MASTER_ADDR");
  const std::string* port = Set(env, "MASTER_PORT");
  const std::string* world = Set(env, "WORLD_SIZE");
  const std::string* rank = Set(env, "RANK");
  if (addr == nullptr || port == nullptr || world == nullptr || rank == nullptr) {
    return std::nullopt;
  }
  // A worker of another launcher: RANK and WORLD_SIZE count workers there.
  for (const char* worker_var : {"LOCAL_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID"}) {
    if (env.count(worker_var) > 0) return std::nullopt;
  }
  if (Set(env, "SLURM_JOB_ID") != nullptr) return std::nullopt;
  if (const std::string* off = Set(env, kNoPlatformVariable.name)) {
    absl::StatusOr<bool> no = ParseBool(kNoPlatformVariable.name, *off);
    if (!no.ok()) return no.status();
    if (*no) return std::nullopt;
  }
  if (FlagIsTrue(explicit_flags, "no-platform-env") || FlagIsTrue(explicit_flags, "standalone") ||
      LastFlagValue(explicit_flags, "rdzv-endpoint") != nullptr) {
    return std::nullopt;
  }
  if (const FlagValue* b = LastFlagValue(explicit_flags, "rdzv-backend");
      b != nullptr && ParseRdzvBackend(b->value) != RdzvBackend::kStatic) {
    return std::nullopt;
  }

  PlatformPlan plan;
  absl::StatusOr<int64_t> nodes = ParseInt("WORLD_SIZE", *world, 1, 1 << 20);
  if (!nodes.ok()) return Platform(nodes.status());
  plan.nodes = static_cast<int>(*nodes);
  absl::StatusOr<int64_t> node_rank = ParseInt("RANK", *rank, 0, plan.nodes - 1);
  if (!node_rank.ok()) {
    return Platform(absl::InvalidArgumentError(
        absl::StrCat("RANK=", *rank, ": not a node rank below WORLD_SIZE=", *world)));
  }
  plan.node_rank = static_cast<int>(*node_rank);
  absl::StatusOr<int64_t> master_port = ParseInt("MASTER_PORT", *port, 1, 65535);
  if (!master_port.ok()) return Platform(master_port.status());
  plan.master_port = static_cast<int>(*master_port);
  plan.master_addr = *addr;

  if (const FlagValue* f = LastFlagValue(explicit_flags, "nnodes")) {
    // The platform's world is fixed: N or N:N.
    const std::string n = absl::StrCat(plan.nodes);
    if (f->value != n && f->value != absl::StrCat(n, ":", n)) {
      return Platform(absl::InvalidArgumentError(absl::StrCat(
          f->where, "=", f->value, " contradicts WORLD_SIZE=", *world, " (the node count)")));
    }
  }
  if (const FlagValue* f = LastFlagValue(explicit_flags, "node-rank");
      f != nullptr && f->value != *rank) {
    return Platform(absl::InvalidArgumentError(
        absl::StrCat(f->where, "=", f->value, " contradicts RANK=", *rank, " (this node's rank)")));
  }
  plan.defaults = {
      {"rdzv-backend", "static", "the platform environment"},
      {"nnodes", absl::StrCat(plan.nodes), "WORLD_SIZE"},
      {"node-rank", absl::StrCat(plan.node_rank), "RANK"},
      {"master-addr", plan.master_addr, "MASTER_ADDR"},
      {"master-port", absl::StrCat(plan.master_port), "MASTER_PORT"},
  };
  return plan;
}

std::string DescribePlatformPlan(const PlatformPlan& plan, const LaunchOptions& options) {
  const bool own_master =
      options.master_addr != plan.master_addr || options.master_port != plan.master_port;
  return absl::StrCat("platform environment: node ", plan.node_rank, " of ", plan.nodes,
                      " (RANK, WORLD_SIZE), master ",
                      FormatHostPort(options.master_addr, options.master_port),
                      own_master ? " (from the command line)" : " (MASTER_ADDR, MASTER_PORT)",
                      ", static rendezvous; ", kIgnoreHint);
}

}  // namespace ddprun::launcher
