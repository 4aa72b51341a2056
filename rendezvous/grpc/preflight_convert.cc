#include "rendezvous/grpc/preflight_convert.h"

#include <chrono>

namespace ddprun::rendezvous {

proto::PreflightConf ToProto(const PreflightSettings& settings) {
  proto::PreflightConf p;
  p.set_enabled(settings.enabled);
  p.set_margin(settings.margin);
  p.set_requalify_interval_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(settings.requalify_interval).count());
  return p;
}

PreflightSettings FromProto(const proto::PreflightConf& conf, const PreflightSettings& defaults) {
  PreflightSettings s = defaults;
  s.enabled = conf.enabled();
  // A margin the agent validated; anything else from the wire keeps the default.
  if (ValidPreflightMargin(conf.margin())) s.margin = conf.margin();
  const std::chrono::milliseconds requalify(conf.requalify_interval_ms());
  if (ValidRequalifyInterval(requalify)) s.requalify_interval = requalify;
  return s;
}

proto::PreflightRequest ToProto(const PreflightRequest& request) {
  proto::PreflightRequest p;
  p.set_generation(request.generation);
  p.set_probe_time_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(request.probe_time).count());
  for (const PreflightPeer& t : request.targets) {
    proto::PreflightRequest::Target* target = p.add_targets();
    target->set_node_id(t.node_id);
    target->set_addr(t.addr);
    target->set_port(t.port);
  }
  return p;
}

PreflightRequest FromProto(const proto::PreflightRequest& p) {
  PreflightRequest request;
  request.generation = p.generation();
  if (p.probe_time_ms() > 0 && p.probe_time_ms() <= kMaxProbeTime.count()) {
    request.probe_time = std::chrono::milliseconds(p.probe_time_ms());
  }
  for (const proto::PreflightRequest::Target& t : p.targets()) {
    request.targets.push_back({t.node_id(), t.addr(), t.port()});
  }
  return request;
}

proto::PreflightReport ToProto(const PreflightReport& report) {
  proto::PreflightReport p;
  p.set_generation(report.generation);
  p.set_cpu_gflops(report.cpu_gflops);
  p.set_elapsed_s(report.elapsed_s);
  if (report.health_check_s.has_value()) p.set_health_check_s(*report.health_check_s);
  for (const PairProbe& pair : report.pairs) {
    proto::PairProbe* q = p.add_pairs();
    q->set_peer_node_id(pair.peer_node_id);
    q->set_rtt_ms(pair.rtt_ms);
    q->set_send_mbps(pair.send_mbps);
    q->set_recv_mbps(pair.recv_mbps);
    q->set_error(pair.error);
  }
  return p;
}

PreflightReport FromProto(const proto::PreflightReport& p) {
  PreflightReport report;
  report.generation = p.generation();
  report.cpu_gflops = p.cpu_gflops();
  report.elapsed_s = p.elapsed_s();
  if (p.has_health_check_s()) report.health_check_s = p.health_check_s();
  for (const proto::PairProbe& q : p.pairs()) {
    report.pairs.push_back({q.peer_node_id(), q.rtt_ms(), q.send_mbps(), q.recv_mbps(), q.error()});
  }
  return report;
}

proto::PreflightStatus ToProto(const PreflightSummary& summary) {
  proto::PreflightStatus p;
  p.set_running(summary.running);
  p.set_took_s(summary.took_s);
  for (const PreflightVerdict& v : summary.verdicts) {
    proto::PreflightStatus::Verdict* q = p.add_verdicts();
    q->set_node_id(v.node_id);
    q->set_hostname(v.hostname);
    q->set_reported(v.reported);
    q->set_cpu_gflops(v.figures.cpu_gflops);
    q->set_send_mbps(v.figures.send_mbps);
    q->set_recv_mbps(v.figures.recv_mbps);
    q->set_rtt_ms(v.figures.rtt_ms);
    q->set_cpu_ratio(v.ratios.cpu_gflops);
    q->set_send_ratio(v.ratios.send_mbps);
    q->set_recv_ratio(v.ratios.recv_mbps);
    q->set_rtt_ratio(v.ratios.rtt_ms);
    if (v.health_check_s.has_value()) q->set_health_check_s(*v.health_check_s);
    for (const std::string& s : v.shortfalls) q->add_shortfalls(s);
    q->set_worst_ratio(v.worst_ratio);
    q->set_kept_out(v.kept_out);
  }
  return p;
}

PreflightSummary FromProto(const proto::PreflightStatus& p) {
  PreflightSummary summary;
  summary.running = p.running();
  summary.took_s = p.took_s();
  for (const proto::PreflightStatus::Verdict& q : p.verdicts()) {
    PreflightVerdict v;
    v.node_id = q.node_id();
    v.hostname = q.hostname();
    v.reported = q.reported();
    v.figures = {q.cpu_gflops(), q.send_mbps(), q.recv_mbps(), q.rtt_ms()};
    v.ratios = {q.cpu_ratio(), q.send_ratio(), q.recv_ratio(), q.rtt_ratio()};
    if (q.has_health_check_s()) v.health_check_s = q.health_check_s();
    v.shortfalls.assign(q.shortfalls().begin(), q.shortfalls().end());
    v.worst_ratio = q.worst_ratio();
    v.kept_out = q.kept_out();
    summary.verdicts.push_back(std::move(v));
  }
  return summary;
}

}  // namespace ddprun::rendezvous
