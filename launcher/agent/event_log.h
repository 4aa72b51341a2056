// --event-log-handler: torchrun records, when a run ends, one event per worker of the last group
// and one for the agent (torch.distributed.elastic.events); "console" writes each as one line
// of JSON on stderr, "null" (the default) drops them. ddprun writes the same objects, field for
// field, so whatever parses torchrun's events reads ddprun's. Pure formatting: the agent gathers
// the facts.
//
// The shape (torch 2.x): {"name": "torchelastic.worker.status.STATE", "source": "WORKER" or
// "AGENT", "timestamp": ms, "metadata": {run_id, global_rank, group_rank, worker_id, role,
// hostname, state, total_run_time, rdzv_backend, raw_error, metadata, agent_restarts}}, where
// the inner "metadata" is itself a JSON string (group_world_size, entry_point, and local_rank,
// role_rank, role_world_size as one-element lists, as torch writes them). Differences: torch
// leaves timestamp 0, ddprun gives the time of the event; worker events carry exit_code.
#ifndef DDPRUN_LAUNCHER_AGENT_EVENT_LOG_H_
#define DDPRUN_LAUNCHER_AGENT_EVENT_LOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

// What every event of one run says about the run.
struct RunFacts {
  std::string run_id;
  std::string role;
  std::string hostname;
  std::string rdzv_backend;
  std::string entry_point;  // the script, module or program's base name
  int group_rank = 0;
  int group_world_size = 1;
  int world_size = 1;
  int agent_restarts = 0;      // restarts spent
  int64_t total_run_time = 0;  // seconds since the agent started
  int64_t timestamp_ms = 0;    // the events' time, ms since the epoch
};

// One worker of the last group at the end of the run.
struct WorkerEventFacts {
  int local_rank = 0;
  int global_rank = 0;
  int pid = 0;
  std::string state;             // SUCCEEDED, FAILED or TERMINATED (stopped by the agent)
  std::optional<int> exit_code;  // absent when a signal ended it
  std::string raw_error;         // JSON text (the error file, or a message); "" writes null
};

std::string FormatWorkerEvent(const RunFacts& run, const WorkerEventFacts& worker);
// torch records SUCCEEDED when the agent's run returned, whatever the workers did, and FAILED
// when it ended with an exception (a signal, a rendezvous error), `raw_error` saying which.
std::string FormatAgentEvent(const RunFacts& run, bool succeeded, const std::string& raw_error);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_AGENT_EVENT_LOG_H_
