#include "launcher/config/validation.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "launcher/config/rdzv_backend.h"
#include "launcher/config/rdzv_conf.h"

namespace ddprun::launcher {
namespace {

// Resolves a program name the way execvp would, so a missing binary is a usage error (exit 2)
// before any worker starts rather than 127 from every worker.
// A directory is "executable" to access(X_OK) but not to execve: it must be a regular file.
absl::StatusOr<std::string> ResolveExecutable(const std::string& name, const Environment& env) {
  auto is_regular = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), F_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": no such file"));
    }
    if (!is_regular(name)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": not a regular file"));
    }
    if (access(name.c_str(), X_OK) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": not executable"));
    }
    return name;
  }
  auto it = env.find("PATH");
  const std::string path = it == env.end() ? "/usr/local/bin:/usr/bin:/bin" : it->second;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) dir = ".";
    std::string candidate = absl::StrCat(dir, "/", name);
    if (is_regular(candidate) && access(candidate.c_str(), X_OK) == 0) return name;
  }
  return absl::InvalidArgumentError(absl::StrCat(name, ": not found in PATH"));
}

// Which kind of spare --preload asks for, now that the entrypoint is known: modules for a
// Python worker; for a --no-python program only "native", the program's promise that it takes
// the hand-over itself (a program that does not would run as a worker with a spare's
// environment, so it is never assumed).
absl::Status ResolvePreloadKind(LaunchOptions* o) {
  if (o->preload.empty()) {
    o->preload_kind = PreloadKind::kOff;
    return absl::OkStatus();
  }
  if (o->entrypoint_kind != EntrypointKind::kBinary) {
    o->preload_kind = PreloadKind::kPython;
    return absl::OkStatus();
  }
  if (o->preload != std::vector<std::string>{"native"}) {
    return absl::InvalidArgumentError(absl::StrCat(
        o->preload_given,
        ": a --no-python program is not preloaded with Python modules; --preload=native if it "
        "takes ddprun's hand-over itself (ddp-train does; docs/guide/warm-restarts.md)"));
  }
  o->preload_kind = PreloadKind::kNative;
  o->preload.clear();
  return absl::OkStatus();
}

absl::Status ApplyHangEnvironment(const Environment& env, LaunchOptions* o) {
  auto get = [&](const char* name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  o->file_timer = get("TORCHELASTIC_ENABLE_FILE_TIMER") == "1";
  o->timer_file = get("TORCHELASTIC_TIMER_FILE");
  if (o->file_timer && !o->timer_file.empty()) {
    struct stat st;
    if (lstat(o->timer_file.c_str(), &st) == 0 && !S_ISFIFO(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("TORCHELASTIC_TIMER_FILE=", o->timer_file, ": exists and is not a FIFO"));
    }
  }
  if (const std::string d = get("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT"); !d.empty()) {
    DDPRUN_ASSIGN_OR_RETURN(o->uninterruptible_timeout,
                            ParseSeconds("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT", d));
  }
  return absl::OkStatus();
}

// The agent keeps a run's logs in LOG_DIR/RUN_ID, or LOG_DIR/RUN_ID-N when that exists, with
// attempt and rank folders below: the run id plus its suffix must fit one file name, and the
// whole below PATH_MAX (std::filesystem threw "File name too long" and aborted ddprun).
absl::Status ValidateLogDir(const LaunchOptions& o) {
  if (o.log_dir.empty() || o.standalone) {
    if (!o.log_dir.empty() && o.log_dir.size() > PATH_MAX - 256) {
      return absl::InvalidArgumentError(absl::StrCat("--log-dir=", ValueForMessage(o.log_dir),
                                                     ": longer than ", PATH_MAX - 256,
                                                     " bytes (logs need room below it)"));
    }
    return absl::OkStatus();
  }
  constexpr size_t kSuffixRoom = 8;  // "-N" when LOG_DIR/RUN_ID exists already
  if (o.rdzv_id.size() + kSuffixRoom > NAME_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv-id=", ValueForMessage(o.rdzv_id), ": with --log-dir it names a folder, so at most ",
        NAME_MAX - kSuffixRoom, " bytes"));
  }
  if (o.log_dir.size() + o.rdzv_id.size() > PATH_MAX - 256) {
    return absl::InvalidArgumentError(absl::StrCat("--log-dir=", ValueForMessage(o.log_dir),
                                                   ": with the run id longer than ", PATH_MAX - 256,
                                                   " bytes (logs need room below it)"));
  }
  return absl::OkStatus();
}

// --rdzv-conf, parsed once here (every value, and the lease they make, as the rendezvous setup
// will use it), with a warning for each key ddprun does not read.
absl::Status ValidateRdzvConf(LaunchOptions* o, std::vector<std::string>* warnings) {
  const std::map<std::string, std::string> given = o->rdzv.given;
  DDPRUN_ASSIGN_OR_RETURN(o->rdzv, ParseRdzvConf(given));
  for (const std::string& key : o->rdzv.unknown_keys) {
    warnings->push_back(UnknownKeyWarning(key, given.at(key)));
  }
  if (o->rdzv_backend != RdzvBackend::kStatic || o->standalone) {
    for (const char* key : {"static_coordination", "static_port"}) {
      if (given.count(key) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--rdzv-conf ", key, "=", given.at(key), ": only for --rdzv-backend=static (",
            o->standalone ? "--standalone" : RdzvBackendName(o->rdzv_backend), " given)"));
      }
    }
  }
  if (o->rdzv_backend == RdzvBackend::kStatic && o->rdzv_endpoint.find(',') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv-endpoint=", ValueForMessage(o->rdzv_endpoint), ": --rdzv-backend=",
        RdzvBackendName(o->rdzv_backend), " takes one HOST[:PORT] (a list is for c10d and etcd)"));
  }
  return absl::OkStatus();
}

// --virtual-local-rank: one GPU of CUDA_VISIBLE_DEVICES (else 0..N-1) per worker.
absl::Status ResolveVirtualGpus(const Environment& env, LaunchOptions* o) {
  if (!o->virtual_local_rank) return absl::OkStatus();
  o->virtual_gpus.clear();
  auto visible = env.find("CUDA_VISIBLE_DEVICES");
  if (visible != env.end() && !visible->second.empty()) {
    o->virtual_gpus = absl::StrSplit(visible->second, ',', absl::SkipWhitespace());
    if (static_cast<int>(o->virtual_gpus.size()) < o->nproc_per_node) {
      return absl::InvalidArgumentError(
          absl::StrCat("--virtual-local-rank: CUDA_VISIBLE_DEVICES=", visible->second, " lists ",
                       o->virtual_gpus.size(), " GPU(s) for ", o->nproc_per_node,
                       " workers (--nproc-per-node); each worker needs one of its own"));
    }
  } else {
    for (int i = 0; i < o->nproc_per_node; ++i) o->virtual_gpus.push_back(absl::StrCat(i));
  }
  return absl::OkStatus();
}

// --nnodes, --node-rank and --standalone against the backend.
absl::Status ValidateNodes(LaunchOptions* o) {
  if (o->standalone && (o->min_nodes != 1 || o->max_nodes != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--standalone runs exactly one node, but --nnodes=", o->min_nodes, ":", o->max_nodes));
  }
  if (o->rdzv_backend == RdzvBackend::kStatic && !o->standalone) {
    if (o->min_nodes != o->max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nnodes=", o->min_nodes, ":", o->max_nodes,
          ": the static rendezvous needs a fixed node count; use --rdzv-backend=c10d for "
          "elastic MIN:MAX"));
    }
    if (o->node_rank < 0) o->node_rank = 0;
    if (o->node_rank >= o->max_nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--node-rank=", o->node_rank, ": must be below --nnodes=", o->max_nodes));
    }
  }
  return absl::OkStatus();
}

// The training script, module or program exists (a program: where execvp would find it).
absl::Status ValidateEntrypoint(const Environment& env, const LaunchOptions& o) {
  if (o.entrypoint.empty()) {
    return absl::InvalidArgumentError(
        "missing the training script (or module with -m, or program with --no-python); see "
        "--help");
  }
  switch (o.entrypoint_kind) {
    case EntrypointKind::kPythonScript:
      if (access(o.entrypoint.c_str(), F_OK) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("training script ", o.entrypoint, ": no such file"));
      }
      if (access(o.entrypoint.c_str(), R_OK) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("training script ", o.entrypoint, ": not readable"));
      }
      break;
    case EntrypointKind::kBinary: {
      auto resolved = ResolveExecutable(o.entrypoint, env);
      if (!resolved.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--no-python program ", resolved.status().message()));
      }
      break;
    }
    case EntrypointKind::kPythonModule:
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const Environment& env, LaunchOptions* o,
                      std::vector<std::string>* warnings) {
  DDPRUN_RETURN_IF_ERROR(ApplyHangEnvironment(env, o));
  if (!o->hang_startup_given.empty() && o->hang_timeout.count() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(o->hang_startup_given,
                     ": only with --hang-timeout (the start's allowance before the "
                     "--hang-timeout that applies from a worker's first sign of life)"));
  }
  DDPRUN_RETURN_IF_ERROR(ValidateLogDir(*o));
  DDPRUN_RETURN_IF_ERROR(ValidateRdzvConf(o, warnings));
  DDPRUN_RETURN_IF_ERROR(ResolveVirtualGpus(env, o));
  DDPRUN_RETURN_IF_ERROR(ValidateNodes(o));
  DDPRUN_RETURN_IF_ERROR(ValidateEntrypoint(env, *o));
  return ResolvePreloadKind(o);
}

}  // namespace ddprun::launcher
