#include "trainer/io/progress.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"

namespace ddprun::trainer {
namespace {
constexpr int kBarWidth = 30;
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
}  // namespace

ProgressReporter::ProgressReporter(std::ostream& out, bool tty, int log_interval)
    : out_(out), tty_(tty), log_interval_(std::max(log_interval, 1)) {}

void ProgressReporter::Step(int64_t epoch, int64_t step, int64_t steps, int64_t done, int64_t total,
                            double loss, double samples_per_s, int64_t global_step) {
  const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / total) : 1.0;
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (step != steps && now - last_draw_ < kRedrawEvery) return;
    last_draw_ = now;
    const int filled = static_cast<int>(frac * kBarWidth);
    std::string bar(filled, '=');
    if (filled < kBarWidth) bar += '>';
    bar.resize(kBarWidth, ' ');
    out_ << absl::StrFormat("\rEpoch %d [%s] %3.0f%% %d/%d loss %.4f %.0f samples/s", epoch, bar,
                            100.0 * frac, step, steps, loss, samples_per_s)
         << std::flush;
    bar_open_ = true;
    return;
  }
  if (step % log_interval_ != 0 && step != 1) return;
  out_ << absl::StrFormat("Train Epoch: %d [%d/%d (%.0f%%)]\tLoss: %.6f\t%.0f samples/s\tstep %d\n",
                          epoch, done, total, 100.0 * frac, loss, samples_per_s, global_step)
       << std::flush;
}

void ProgressReporter::EndEpoch() {
  if (bar_open_) out_ << "\n" << std::flush;
  bar_open_ = false;
}

}  // namespace ddprun::trainer
