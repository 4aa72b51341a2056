// `ddprun status`'s text (FormatRunStatusText): spares (issue 40) are shown as such; the
// preflight's verdicts (issue 41) one line a node.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "launcher/cmd/status_command.h"

namespace ddprun::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatusTextTest, SparesAreCountedAndListedAsSpares) {
  const nlohmann::json run = nlohmann::json::parse(R"({
    "run_id": "job17", "phase": "running", "round": 2, "min_nodes": 2, "max_nodes": 2,
    "restarts_used": 1, "max_restarts": 3, "spares": 1, "spares_used": 1,
    "members": [
      {"node_id": "a", "hostname": "n0", "addr": "10.0.0.1", "group_rank": 0,
       "nproc_per_node": 2, "state": "running"},
      {"node_id": "c", "hostname": "n2", "addr": "10.0.0.3", "group_rank": 1,
       "nproc_per_node": 2, "state": "running"},
      {"node_id": "d", "hostname": "n3", "addr": "10.0.0.4", "group_rank": -1,
       "nproc_per_node": 2, "state": "spare"}]})");
  const std::string text = FormatRunStatusText(run);
  EXPECT_THAT(text, HasSubstr("restarts used 1 of 3, spares 1 (used 1)\n"));
  EXPECT_THAT(text, HasSubstr("  spare        n3  10.0.0.4  nproc 2  spare  d\n"));
  EXPECT_THAT(text, HasSubstr("  node rank 1  n2"));

  const nlohmann::json none = nlohmann::json::parse(R"({
    "run_id": "job17", "phase": "joining", "round": 1, "min_nodes": 2, "max_nodes": 2,
    "restarts_used": 0, "max_restarts": 3, "spares": 0, "spares_used": 0,
    "members": [{"node_id": "a", "hostname": "n0", "addr": "10.0.0.1", "group_rank": -1,
                 "nproc_per_node": 2, "state": "waiting"}]})");
  // A run without spares says nothing of them.
  const std::string quiet = FormatRunStatusText(none);
  EXPECT_THAT(quiet, Not(HasSubstr("spare")));
  EXPECT_THAT(quiet, HasSubstr("  waiting      n0"));
}

// Two nodes of one host (a test, or a host with a node per set of GPUs) share its name: the
// node id tells their preflight lines apart.
TEST(StatusTextTest, EachPreflightLineNamesItsNodeBesideItsHost) {
  const nlohmann::json run = nlohmann::json::parse(R"({
    "run_id": "job17", "phase": "running", "round": 1, "min_nodes": 2, "max_nodes": 2,
    "restarts_used": 0, "max_restarts": 3, "spares": 0, "spares_used": 0,
    "preflight": {"running": false, "took_s": 1.5, "nodes": [
      {"node_id": "n0_11_a", "hostname": "n0", "text": "cpu 30.1 GFLOP/s, send 900 Mbit/s"},
      {"node_id": "n0_12_b", "hostname": "n0", "text": "cpu 9.5 GFLOP/s (0.32x) SLOW"}]},
    "members": []})");
  const std::string text = FormatRunStatusText(run);
  EXPECT_THAT(text, HasSubstr("preflight (1.50 s):\n"
                              "  n0  n0_11_a  cpu 30.1 GFLOP/s, send 900 Mbit/s\n"
                              "  n0  n0_12_b  cpu 9.5 GFLOP/s (0.32x) SLOW\n"));
}

}  // namespace
}  // namespace ddprun::launcher
