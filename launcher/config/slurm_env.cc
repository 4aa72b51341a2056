#include "launcher/config/slurm_env.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/env_variables.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "launcher/config/flag_value.h"
#include "launcher/config/host_info.h"
#include "launcher/config/hostlist.h"

namespace ddprun::launcher {
namespace {

const std::string* Find(const Environment& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

// The first of `keys` that is set and not empty; its name goes to `*var`.
const std::string* FirstSet(const Environment& env, std::initializer_list<const char*> keys,
                            std::string* var) {
  for (const char* key : keys) {
    const std::string* v = Find(env, key);
    if (v != nullptr && !v->empty()) {
      *var = key;
      return v;
    }
  }
  return nullptr;
}

absl::StatusOr<int> IntVar(const std::string& var, const std::string& value, int min) {
  DDPRUN_ASSIGN_OR_RETURN(int64_t v,
                          ParseInt(var, absl::StripAsciiWhitespace(value), min, int64_t{1} << 30));
  return static_cast<int>(v);
}

// Job ids are decimal; anything else (a site that wraps srun) still gets a stable number.
uint64_t IdNumber(const std::string& id) {
  uint64_t v = 0;
  if (absl::SimpleAtoi(id, &v)) return v;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A job's two ports share one slot number: the job id scaled so that its first 16 steps
// differ, within a 4000-wide window per port.
int PortSlot(const std::string& job_id, const std::string& step_id) {
  const uint64_t step = step_id.empty() ? 0 : IdNumber(step_id);
  return static_cast<int>((IdNumber(job_id) * 16 + step) % 4000);
}

std::string Lower(const std::string& s) { return absl::AsciiStrToLower(s); }

std::string StepName(const SlurmStep& s) {
  return s.in_step() ? absl::StrCat("Slurm job ", s.job_id, " step ", s.step_id)
                     : absl::StrCat("Slurm job ", s.job_id, " (batch script, outside srun)");
}

std::string NodesFact(const SlurmStep& s) {
  return absl::StrCat("the Slurm step's ", s.num_nodes, " node", s.num_nodes == 1 ? "" : "s", " (",
                      s.num_nodes_var, "=", s.num_nodes, ")");
}

std::string TasksFact(const SlurmStep& s) {
  return absl::StrCat(s.MaxTasksPerNode(), " Slurm tasks per node (", s.tasks_per_node_var, ")");
}

// Contradictions between the explicit flags and the step; see PlanSlurm.
absl::Status CheckExplicitFlags(const SlurmStep& step, SlurmMode mode,
                                const std::vector<FlagValue>& flags) {
  auto conflict = [](const FlagValue& f, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(f.where, "=", f.value, " contradicts ", why,
                                                   " (pass --no-slurm to ignore Slurm)"));
  };
  if (const FlagValue* f = LastFlagValue(flags, "standalone")) {
    absl::StatusOr<bool> on = ParseBool(f->where, f->value);
    if (on.ok() && *on) {
      if (mode == SlurmMode::kPerTask) return conflict(*f, TasksFact(step));
      if (step.in_step() && step.num_nodes > 1) return conflict(*f, NodesFact(step));
    }
  }
  if (const FlagValue* f = LastFlagValue(flags, "nnodes"); f != nullptr && step.in_step()) {
    int lo = 0, hi = 0;
    DDPRUN_RETURN_IF_ERROR(ParseNnodes(f->where, f->value, &lo, &hi));
    if (step.num_nodes < lo || step.num_nodes > hi) return conflict(*f, NodesFact(step));
  }
  if (const FlagValue* f = LastFlagValue(flags, "node-rank"); f != nullptr && step.in_step()) {
    int rank = -1;
    if (absl::SimpleAtoi(f->value, &rank) && rank != step.node_id) {
      return conflict(*f, absl::StrCat("SLURM_NODEID=", step.node_id));
    }
  }
  if (const FlagValue* f = LastFlagValue(flags, "nproc-per-node")) {
    const std::string v = Lower(std::string(absl::StripAsciiWhitespace(f->value)));
    if (mode == SlurmMode::kPerTask && v != "1") {
      return absl::InvalidArgumentError(absl::StrCat(
          f->where, "=", f->value, " contradicts ", TasksFact(step),
          ": in per-task mode each Slurm task is one worker; run one task per node (srun "
          "--ntasks-per-node=1) for ddprun to start several workers per node"));
    }
    if (v == "gpu" && step.gpus == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          f->where,
          "=gpu: the Slurm step has no GPU on this node (SLURM_STEP_GPUS, "
          "SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES are unset or empty); request GPUs with "
          "--gpus-per-node or give a number"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int SlurmStep::LocalTasks() const {
  if (node_id >= 0 && node_id < static_cast<int>(tasks_per_node.size())) {
    return tasks_per_node[node_id];
  }
  return 1;
}

int SlurmStep::MaxTasksPerNode() const {
  if (tasks_per_node.empty()) return 1;
  return *std::max_element(tasks_per_node.begin(), tasks_per_node.end());
}

bool SlurmWanted(const Environment& env, const std::vector<FlagValue>& given) {
  const std::string* job = Find(env, "SLURM_JOB_ID");
  if (job == nullptr || job->empty()) return false;
  if (const std::string* off = Find(env, kNoSlurmVariable.name); off != nullptr && !off->empty()) {
    absl::StatusOr<bool> no = ParseBool(kNoSlurmVariable.name, *off);
    if (no.ok() && *no) return false;
  }
  return !FlagIsTrue(given, "no-slurm");
}

absl::StatusOr<std::vector<int>> ParseTasksPerNode(const std::string& what,
                                                   const std::string& value) {
  std::vector<int> out;
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, ": expected Slurm's tasks-per-node form, e.g. 2(x3),1"));
  };
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    int tasks = 0, repeat = 1;
    const size_t paren = item.find('(');
    if (paren != absl::string_view::npos) {
      absl::string_view rep = item.substr(paren);
      if (!absl::ConsumePrefix(&rep, "(x") || !absl::ConsumeSuffix(&rep, ")") ||
          !absl::SimpleAtoi(rep, &repeat) || repeat < 1) {
        return bad();
      }
      item = item.substr(0, paren);
    }
    if (!absl::SimpleAtoi(item, &tasks) || tasks < 0 ||
        out.size() + static_cast<size_t>(repeat) > kMaxHostlistHosts) {
      return bad();
    }
    out.insert(out.end(), repeat, tasks);
  }
  return out;
}

absl::StatusOr<SlurmStep> ReadSlurmStep(const Environment& env) {
  SlurmStep s;
  std::string var;
  if (const std::string* v = FirstSet(env, {"SLURM_JOB_ID"}, &var)) s.job_id = *v;
  if (const std::string* v = FirstSet(env, {"SLURM_STEP_ID", "SLURM_STEPID"}, &var)) {
    s.step_id = *v;
  }
  const std::string* list =
      s.in_step() ? FirstSet(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"},
                             &s.nodelist_var)
                  : FirstSet(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &s.nodelist_var);
  if (list == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("SLURM_JOB_ID=", s.job_id,
                     " is set but no node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST) is; "
                     "pass --no-slurm to ignore Slurm"));
  }
  absl::StatusOr<std::vector<std::string>> nodes = ExpandHostlist(*list);
  if (!nodes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(s.nodelist_var, ": ", nodes.status().message()));
  }
  s.nodes = std::move(*nodes);

  const std::string* count =
      s.in_step() ? FirstSet(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"},
                             &s.num_nodes_var)
                  : FirstSet(env, {"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}, &s.num_nodes_var);
  if (count != nullptr) {
    DDPRUN_ASSIGN_OR_RETURN(s.num_nodes, IntVar(s.num_nodes_var, *count, 1));
  } else {
    s.num_nodes_var = s.nodelist_var;
    s.num_nodes = static_cast<int>(s.nodes.size());
  }
  if (const std::string* v = FirstSet(env, {"SLURM_NODEID"}, &var)) {
    DDPRUN_ASSIGN_OR_RETURN(s.node_id, IntVar(var, *v, 0));
    if (s.in_step() && s.node_id >= s.num_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("SLURM_NODEID=", s.node_id, ": not below ",
                                                     s.num_nodes_var, "=", s.num_nodes));
    }
  }
  if (const std::string* v = FirstSet(env, {"SLURMD_NODENAME"}, &var)) s.node_name = *v;

  if (const std::string* v = FirstSet(
          env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"},
          &s.tasks_per_node_var)) {
    if (s.tasks_per_node_var == "SLURM_NTASKS_PER_NODE") {
      DDPRUN_ASSIGN_OR_RETURN(int n, IntVar(s.tasks_per_node_var, *v, 1));
      s.tasks_per_node.assign(s.num_nodes, n);
    } else {
      DDPRUN_ASSIGN_OR_RETURN(s.tasks_per_node, ParseTasksPerNode(s.tasks_per_node_var, *v));
    }
  }
  if (const std::string* v = FirstSet(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &var)) {
    DDPRUN_ASSIGN_OR_RETURN(s.ntasks, IntVar(var, *v, 1));
  } else if (!s.tasks_per_node.empty()) {
    s.ntasks = 0;
    for (int t : s.tasks_per_node) s.ntasks += t;
  }
  if (const std::string* v = FirstSet(env, {"SLURM_PROCID"}, &var)) {
    DDPRUN_ASSIGN_OR_RETURN(s.procid, IntVar(var, *v, 0));
  }
  if (const std::string* v = FirstSet(env, {"SLURM_LOCALID"}, &var)) {
    DDPRUN_ASSIGN_OR_RETURN(s.localid, IntVar(var, *v, 0));
  }
  if (s.in_step() && s.procid >= s.ntasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("SLURM_PROCID=", s.procid, ": not below the step's ", s.ntasks, " tasks"));
  }

  // The step's GPUs on this node: Slurm's own list first; CUDA_VISIBLE_DEVICES as Slurm set it.
  // /dev/nvidiaN is not consulted: a step that asked for no GPU must not use the node's.
  if (const std::string* v = FirstSet(env, {"SLURM_STEP_GPUS"}, &s.gpus_var)) {
    Environment only = {{"CUDA_VISIBLE_DEVICES", *v}};
    s.gpus = CountVisibleGpus(only);
  } else if (const std::string* v = FirstSet(env, {"SLURM_GPUS_ON_NODE"}, &s.gpus_var)) {
    DDPRUN_ASSIGN_OR_RETURN(s.gpus, IntVar(s.gpus_var, *v, 0));
  } else if (const std::string* v = Find(env, "CUDA_VISIBLE_DEVICES")) {
    s.gpus_var = "CUDA_VISIBLE_DEVICES";
    Environment only = {{"CUDA_VISIBLE_DEVICES", *v}};
    s.gpus = CountVisibleGpus(only);
  }
  if (const std::string* v = FirstSet(env, {"SLURM_RESTART_COUNT"}, &var)) {
    DDPRUN_ASSIGN_OR_RETURN(s.restart_count, IntVar(var, *v, 0));
  }
  return s;
}

int SlurmRdzvPort(const std::string& job_id, const std::string& step_id) {
  return 20000 + PortSlot(job_id, step_id);
}

int SlurmMasterPort(const std::string& job_id, const std::string& step_id) {
  return 24000 + PortSlot(job_id, step_id);
}

absl::StatusOr<SlurmPlan> PlanSlurm(const SlurmStep& step,
                                    const std::vector<FlagValue>& explicit_flags) {
  SlurmPlan plan;
  plan.step = step;
  // Outside srun only this one process exists, whatever the job's task layout says.
  plan.mode =
      step.in_step() && step.MaxTasksPerNode() > 1 ? SlurmMode::kPerTask : SlurmMode::kAgent;
  plan.run_id = step.in_step() ? absl::StrCat(step.job_id, ".", step.step_id) : step.job_id;
  plan.first_host = step.nodes.front();
  plan.rdzv_port = SlurmRdzvPort(step.job_id, step.step_id);
  plan.master_port = SlurmMasterPort(step.job_id, step.step_id);
  DDPRUN_RETURN_IF_ERROR(CheckExplicitFlags(step, plan.mode, explicit_flags));

  std::vector<FlagValue> d;
  const int nodes = step.in_step() ? step.num_nodes : 1;
  const std::string nodes_where = step.in_step() ? step.num_nodes_var : "Slurm (outside srun)";
  const int node_rank = step.in_step() ? step.node_id : 0;
  const std::string& list_var = step.nodelist_var;
  d.push_back({"rdzv-id", plan.run_id, "SLURM_JOB_ID"});
  d.push_back({"nnodes", absl::StrCat(nodes), nodes_where});
  d.push_back(
      {"node-rank", absl::StrCat(node_rank), step.in_step() ? "SLURM_NODEID" : nodes_where});
  if (!step.in_step() && step.num_nodes > 1) {
    plan.warnings.push_back(absl::StrCat(
        "ddprun runs in the batch script of a ", step.num_nodes,
        "-node job, outside srun: only this node takes part (use `srun ddprun ...` for all)"));
  }

  if (plan.mode == SlurmMode::kPerTask) {
    // No agent runs, so its flags would be silently dropped; say so once.
    std::vector<std::string> unused;
    for (const char* flag :
         {"max-restarts", "rdzv-backend", "rdzv-endpoint", "rdzv-conf", "log-dir", "redirects",
          "tee", "local-ranks-filter", "signals-to-handle", "stop-timeout"}) {
      if (const FlagValue* f = LastFlagValue(explicit_flags, flag)) {
        unused.push_back(absl::StrCat(f->where, "=", f->value));
      }
    }
    if (!unused.empty()) {
      plan.warnings.push_back(absl::StrCat(
          "per-task mode runs no agent; ignored: ", absl::StrJoin(unused, ", "),
          " (Slurm delivers signals and requeues; run one task per node for the agent)"));
    }
    d.push_back({"master-addr", plan.first_host, list_var});
    d.push_back({"master-port", absl::StrCat(plan.master_port), "SLURM_JOB_ID"});
  } else {
    d.push_back({"nproc-per-node", step.gpus > 0 ? absl::StrCat(step.gpus) : "1",
                 step.gpus > 0 ? step.gpus_var : "Slurm (no GPU in the step)"});
    // A --signal=USR1@N warning must reach the workers (so they can checkpoint) rather than
    // kill the agent, whose default action for SIGUSR1 would be to die.
    d.push_back({"signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2", "Slurm"});
    const bool standalone = FlagIsTrue(explicit_flags, "standalone");
    const FlagValue* backend = LastFlagValue(explicit_flags, "rdzv-backend");
    const std::optional<RdzvBackend> b =
        backend == nullptr ? RdzvBackend::kC10d : ParseRdzvBackend(backend->value);
    if (standalone) {
      // --standalone in a one-node step: nothing to agree on; keep the GPU default only.
    } else if (b == RdzvBackend::kC10d) {
      d.push_back({"rdzv-backend", "c10d", "Slurm"});
      d.push_back({"rdzv-endpoint", FormatHostPort(plan.first_host, plan.rdzv_port), list_var});
      if (LastFlagValue(explicit_flags, "rdzv-endpoint") == nullptr) {
        // Exactly one agent serves: the one on the step's first node. Asking each agent whether
        // the endpoint's name is local would elect several where node names share an address
        // (several slurmd on one host, as in the tests) and none behind some NAT setups.
        const bool host =
            step.node_name.empty() ? node_rank == 0 : step.node_name == plan.first_host;
        d.push_back({"rdzv-conf", absl::StrCat("is_host=", host ? 1 : 0), list_var});
      }
    } else if (b == RdzvBackend::kStatic) {
      d.push_back({"master-addr", plan.first_host, list_var});
      d.push_back({"master-port", absl::StrCat(plan.master_port), "SLURM_JOB_ID"});
    }
  }
  for (FlagValue& f : d) {
    if (LastFlagValue(explicit_flags, f.flag) == nullptr || f.flag == "rdzv-conf") {
      plan.defaults.push_back(std::move(f));
    }
  }
  return plan;
}

std::string DescribeSlurmPlan(const SlurmPlan& plan, const LaunchOptions& o) {
  const SlurmStep& s = plan.step;
  if (plan.mode == SlurmMode::kPerTask) {
    return absl::StrCat(StepName(s), ": per-task mode, rank ", s.procid, " of ", s.ntasks,
                        ", local rank ", s.localid, " of ", s.LocalTasks(), ", master ",
                        FormatHostPort(o.master_addr, o.master_port),
                        " (no agent; Slurm restarts)");
  }
  std::string line = absl::StrCat(StepName(s), ": agent mode, ");
  if (o.min_nodes == o.max_nodes) {
    absl::StrAppend(&line, o.max_nodes, o.max_nodes == 1 ? " node" : " nodes");
  } else {
    absl::StrAppend(&line, o.min_nodes, ":", o.max_nodes, " nodes");
  }
  absl::StrAppend(&line, ", node rank ", o.node_rank, ", ", o.nproc_per_node,
                  o.nproc_per_node == 1 ? " worker" : " workers", " per node");
  if (o.standalone) {
    absl::StrAppend(&line, ", standalone");
  } else if (o.rdzv_backend == RdzvBackend::kStatic) {
    absl::StrAppend(&line, ", static, master ", FormatHostPort(o.master_addr, o.master_port));
  } else {
    absl::StrAppend(&line, ", rendezvous ", RdzvBackendName(o.rdzv_backend), " ", o.rdzv_endpoint);
  }
  return line;
}

}  // namespace ddprun::launcher
