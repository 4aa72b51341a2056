#include "rendezvous/core/histogram.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ddprun::rendezvous {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), in_bucket_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++in_bucket_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, std::string* out, const std::string& labels) const {
  const std::string before_le = labels.empty() ? "" : absl::StrCat(labels, ",");
  const std::string braced = labels.empty() ? "" : absl::StrCat("{", labels, "}");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += in_bucket_[i];
    absl::StrAppend(out, name, "_bucket{", before_le, "le=\"", SampleValue(bounds_[i]), "\"} ",
                    cumulative, "\n");
  }
  absl::StrAppend(out, name, "_bucket{", before_le, "le=\"+Inf\"} ", count_, "\n", name, "_sum",
                  braced, " ", SampleValue(sum_), "\n", name, "_count", braced, " ", count_, "\n");
}

std::string SampleValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Within 2^53 a double that is an integer converts exactly (and without undefined behaviour).
  if (std::abs(v) < 9007199254740992.0 && v == std::trunc(v)) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrCat(v);
}

}  // namespace ddprun::rendezvous
