#include "trainer/io/metrics.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace ddprun::trainer {

std::string FormatMetricsLine(const EpochMetrics& m) {
  nlohmann::ordered_json j;
  j["epoch"] = m.epoch;
  j["world_size"] = m.world_size;
  j["samples_per_s"] = m.samples_per_s;
  j["train_loss"] = m.train_loss;
  j["test_loss"] = m.test_loss;
  j["test_acc"] = m.test_acc;
  j["wall_s"] = m.wall_s;
  j["train_s"] = m.train_s;
  j["lr"] = m.lr;
  j["samples"] = m.samples;
  j["global_step"] = m.global_step;
  j["resumed"] = m.resumed;
  return j.dump();
}

absl::Status MetricsWriter::Open(const std::string& path) {
  path_ = path;
  out_.open(path, std::ios::out | std::ios::app);
  if (!out_.is_open()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": cannot open metrics file"));
  }
  return absl::OkStatus();
}

absl::Status MetricsWriter::Write(const EpochMetrics& m) {
  out_ << FormatMetricsLine(m) << '\n';
  out_.flush();
  if (!out_) return absl::InternalError(absl::StrCat(path_, ": write failed"));
  return absl::OkStatus();
}

}  // namespace ddprun::trainer
