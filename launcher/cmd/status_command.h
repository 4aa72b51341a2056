// `ddprun status --rdzv-endpoint=HOST:PORT --rdzv-id=ID [--rdzv-conf=token_file=...]`: prints a
// run's phase, round, members with their ranks and addresses, and restarts used.
//
//   --json    one JSON object (below) instead of text
//   --watch   again every --interval seconds (default 1) until the run closes: text redraws
//             the screen on a terminal; with --json, one object per line
//
// The JSON object (stable: fields are only ever added; "version" changes if one must change):
//   version        1
//   run_id         the run
//   phase          "joining", "running", "recovering" (a restarted server rebuilding) or
//                  "closed"
//   round          the current round (1, 2, ...; 0 before the first)
//   min_nodes, max_nodes, restarts_used, max_restarts
//   close_message  why the run closed ("" while open or when it succeeded)
//   members        [{node_id, hostname, addr, group_rank (-1: waiting for the next round),
//                    state ("running", "waiting", "recovering"), nproc_per_node}]
#ifndef DDPRUN_LAUNCHER_CMD_STATUS_COMMAND_H_
#define DDPRUN_LAUNCHER_CMD_STATUS_COMMAND_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/config/host_info.h"

namespace ddprun::launcher {

// `args` follows the word "status". Returns the exit code (0, 2 usage, 3 unreachable).
int RunStatusCommand(const std::vector<std::string>& args, const HostInfo& host);

// The text `ddprun status` prints for a run's JSON object.
std::string FormatRunStatusText(const nlohmann::json& run);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CMD_STATUS_COMMAND_H_
