#include "launcher/agent/event_log.h"

#include <nlohmann/json.hpp>

namespace ddprun::launcher {
namespace {

using Json = nlohmann::ordered_json;

Json Event(const RunFacts& run, const std::string& state, const char* source, Json metadata) {
  Json event;
  event["name"] = "torchelastic.worker.status." + state;
  event["source"] = source;
  event["timestamp"] = run.timestamp_ms;
  event["metadata"] = std::move(metadata);
  return event;
}

Json CommonMetadata(const RunFacts& run, const std::string& state, Json global_rank, Json worker_id,
                    Json raw_error, Json inner) {
  Json m;
  m["run_id"] = run.run_id;
  m["global_rank"] = std::move(global_rank);
  m["group_rank"] = run.group_rank;
  m["worker_id"] = std::move(worker_id);
  m["role"] = run.role;
  m["hostname"] = run.hostname;
  m["state"] = state;
  m["total_run_time"] = run.total_run_time;
  m["rdzv_backend"] = run.rdzv_backend;
  m["raw_error"] = std::move(raw_error);
  m["metadata"] = inner.dump();  // a string holding JSON, as torch writes it
  m["agent_restarts"] = run.agent_restarts;
  return m;
}

Json InnerMetadata(const RunFacts& run) {
  Json inner;
  inner["group_world_size"] = run.group_world_size;
  inner["entry_point"] = run.entry_point;
  return inner;
}

Json NullIfEmpty(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

}  // namespace

std::string FormatWorkerEvent(const RunFacts& run, const WorkerEventFacts& worker) {
  Json inner = InnerMetadata(run);
  // torch stores these as 1-tuples (a trailing comma in its source), which JSON makes lists.
  inner["local_rank"] = Json::array({worker.local_rank});
  inner["role_rank"] = Json::array({worker.global_rank});
  inner["role_world_size"] = Json::array({run.world_size});
  Json m = CommonMetadata(run, worker.state, worker.global_rank, std::to_string(worker.pid),
                          NullIfEmpty(worker.raw_error), std::move(inner));
  m["exit_code"] = worker.exit_code.has_value() ? Json(*worker.exit_code) : Json(nullptr);
  return Event(run, worker.state, "WORKER", std::move(m)).dump();
}

std::string FormatAgentEvent(const RunFacts& run, bool succeeded, const std::string& raw_error) {
  const std::string state = succeeded ? "SUCCEEDED" : "FAILED";
  Json m = CommonMetadata(run, state, nullptr, nullptr, NullIfEmpty(raw_error), InnerMetadata(run));
  return Event(run, state, "AGENT", std::move(m)).dump();
}

}  // namespace ddprun::launcher
