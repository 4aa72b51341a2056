// The status page of ddprun-rdzv (GET /): one self-contained HTML page (no script, no asset from
// elsewhere) that lists every run with its members — host, address, group rank, global ranks,
// last heartbeat, state — and its latest restarts with their causes and how long the next
// round took to form, the agents' latest timeline steps (their events.jsonl lines), their
// latest recoveries and effective training ratios (recovery_ledger.h), and
// refreshes itself every 2 seconds (a run of more than 256 nodes lists
// its first 256). Pure formatting.
#ifndef DDPRUN_RENDEZVOUS_CORE_STATUS_PAGE_H_
#define DDPRUN_RENDEZVOUS_CORE_STATUS_PAGE_H_

#include <string>
#include <vector>

#include "common/clock.h"
#include "rendezvous/core/run_state.h"
#include "rendezvous/core/server_metrics.h"

namespace ddprun::rendezvous {

// `now` ages the heartbeats and restarts; `server` names the page ("host:port").
std::string RenderStatusPage(const std::vector<RunStatus>& runs, const ServerMetrics& metrics,
                             const std::string& server, TimePoint now);

// &, <, >, " and ' as entities.
std::string HtmlEscape(const std::string& text);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_STATUS_PAGE_H_
