#include "launcher/workers/output_stream.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ddprun::launcher {

OutputStream::OutputStream(Config config) : config_(std::move(config)) {}

void OutputStream::EmitLine(absl::string_view line, Batch* batch) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF
  // A line redrawn with \r (a progress bar; any update shown of it came from such a \r) ends
  // showing what follows its last \r.
  const size_t cr = line.rfind('\r');
  const bool redrawn = cr != absl::string_view::npos;
  if (redrawn) line.remove_prefix(cr + 1);
  if (config_.console_fd >= 0) {
    absl::StrAppend(&batch->console, redrawn ? "\r" : "", config_.prefix, line, "\n");
  }
  shown_.clear();
  if (config_.filtered_fd >= 0) {
    for (const std::string& f : config_.filters) {
      if (absl::StrContains(line, f)) {
        absl::StrAppend(&batch->filtered, config_.filtered_prefix, line, "\n");
        break;
      }
    }
  }
  if (config_.tail_lines > 0) {
    tail_.emplace_back(line);
    if (tail_.size() > config_.tail_lines) tail_.pop_front();
  }
}

void OutputStream::Feed(absl::string_view data) {
  if (config_.log_fd >= 0) WriteAll(config_.log_fd, data);
  if (capturing_ && capture_.size() < capture_limit_) {
    capture_.append(data.data(), std::min(data.size(), capture_limit_ - capture_.size()));
  }
  Batch batch;
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) {
      partial_.append(data.data(), data.size());
      if (partial_.size() >= kMaxLine) {
        EmitLine(partial_, &batch);
        partial_.clear();
      }
      break;
    }
    if (partial_.empty()) {
      EmitLine(data.substr(0, nl), &batch);
    } else {
      partial_.append(data.data(), nl);
      EmitLine(partial_, &batch);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
  ShowUpdate(&batch);
  Write(batch);
}

void OutputStream::ShowUpdate(Batch* batch) {
  // Live \r updates (tqdm and the like): the text after the unfinished line's last \r is shown
  // now, whole, over the line on the console, not an hour later when the line ends.
  if (config_.console_fd < 0) return;
  const size_t cr = partial_.rfind('\r');
  if (cr == std::string::npos) return;
  absl::string_view update = absl::string_view(partial_).substr(cr + 1);
  if (update.empty() || update == shown_) return;
  absl::StrAppend(&batch->console, "\r", config_.prefix, update);
  shown_ = std::string(update);
}

void OutputStream::Write(const Batch& batch) {
  // One write each: whole lines, never cut by another worker's (one loop thread writes all).
  if (!batch.console.empty()) WriteAll(config_.console_fd, batch.console);
  if (!batch.filtered.empty()) WriteAll(config_.filtered_fd, batch.filtered);
}

void OutputStream::Finish() {
  if (partial_.empty()) return;
  Batch batch;
  EmitLine(partial_, &batch);
  partial_.clear();
  Write(batch);
}

}  // namespace ddprun::launcher
