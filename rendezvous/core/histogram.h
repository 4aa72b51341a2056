// A Prometheus histogram (cumulative buckets by upper bound, plus sum and count) and the text of
// one sample value, for the server's /metrics. Pure; not thread-safe (the server's loop owns
// every instance).
#ifndef DDPRUN_RENDEZVOUS_CORE_HISTOGRAM_H_
#define DDPRUN_RENDEZVOUS_CORE_HISTOGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::rendezvous {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Appends NAME_bucket{le=...}, NAME_sum and NAME_count lines. `labels` (already escaped,
  // `a="x",b="y"`) go before `le` on every line; empty: none.
  void Render(const std::string& name, std::string* out, const std::string& labels = "") const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> in_bucket_;  // observations <= bound i and > bound i-1; last: +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// A sample value as the exposition format writes it: integers without a fraction, others as
// the shortest round-trip text, +Inf, -Inf and NaN by their names.
std::string SampleValue(double v);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CORE_HISTOGRAM_H_
