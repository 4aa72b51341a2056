#include "launcher/workers/output_stream.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ddprun::launcher {

OutputStream::OutputStream(Config config) : config_(std::move(config)) {}

bool OutputStream::PassesThrough() const {
  return config_.prefix.empty() && config_.console != Console::kTerminal;
}

bool OutputStream::ConsoleLineOpen() const { return continuing_ || partial_shown_ > 0; }

absl::string_view OutputStream::PrefixFor(Batch* batch) const {
  if (!ConsoleLineOpen()) return config_.prefix;
  // A continuation, composed without the prefix; whether the line is still this stream's on a
  // shared console (another writer may have ended it since) is decided where the batch is
  // queued (ConsoleWriter::Write), under the console's lock.
  if (batch->console.empty()) batch->continues = true;
  return absl::string_view();
}

void OutputStream::EmitLine(absl::string_view line, LineEnd end, Batch* batch) {
  const bool terminal = config_.console == Console::kTerminal;
  absl::string_view text = line;  // what the tail and the filters see
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);  // CRLF
  // A line redrawn with \r (a progress bar; any update shown of it came from such a \r) ends
  // showing what follows its last \r.
  const size_t cr = text.rfind('\r');
  const bool redrawn = cr != absl::string_view::npos;
  if (redrawn) text.remove_prefix(cr + 1);
  if (config_.console_fd >= 0 && !PassesThrough()) {
    const absl::string_view prefix = PrefixFor(batch);
    // What the console has not shown of the line yet (a line in progress was shown in part).
    absl::string_view unshown = end == LineEnd::kNewline && terminal && !redrawn ? text : line;
    unshown.remove_prefix(std::min(partial_shown_, unshown.size()));
    if (end == LineEnd::kPiece) {
      absl::StrAppend(&batch->console, prefix, unshown);
    } else if (redrawn && !continuing_) {
      // A redrawn line ends as its redraws were shown, live (ShowUpdate), even on a pipe.
      absl::StrAppend(&batch->console, "\r", config_.prefix, text, "\n");
    } else {
      absl::StrAppend(&batch->console, prefix, unshown, "\n");  // only the prefix is added
    }
  }
  continuing_ = end == LineEnd::kPiece;
  partial_shown_ = 0;
  shown_.clear();
  if (config_.filtered_fd >= 0) {
    for (const std::string& f : config_.filters) {
      if (absl::StrContains(text, f)) {
        absl::StrAppend(&batch->filtered, config_.filtered_prefix, text, "\n");
        break;
      }
    }
  }
  if (config_.tail_lines > 0) {
    tail_.emplace_back(text);
    if (tail_.size() > config_.tail_lines) tail_.pop_front();
  }
}

void OutputStream::EmitPassThrough(absl::string_view data, Batch* batch) {
  // No prefix and no terminal: the console gets the bytes unchanged, cut only where a line
  // ends (or at kMaxLine), so that ranks' lines do not interleave mid-line.
  if (config_.console_fd < 0 || !PassesThrough()) return;
  passthrough_.append(data.data(), data.size());
  const size_t last_nl = passthrough_.rfind('\n');
  size_t cut = last_nl == std::string::npos ? 0 : last_nl + 1;
  if (passthrough_.size() - cut >= kMaxLine) cut = passthrough_.size();
  if (cut == 0) return;
  batch->console.append(passthrough_, 0, cut);
  passthrough_.erase(0, cut);
}

void OutputStream::Feed(absl::string_view data) {
  if (config_.log_fd >= 0 && !WriteAll(config_.log_fd, data) && !log_failed_) {
    // Say so once: a log that silently stops (ENOSPC) is worse than none.
    log_failed_ = true;
    LogWarning(absl::StrCat("cannot write the worker's log ",
                            config_.log_path.empty() ? "file" : config_.log_path, ": ",
                            strerror(errno), "; it is incomplete from here on"));
  }
  if (capturing_ && capture_.size() < capture_limit_) {
    capture_.append(data.data(), std::min(data.size(), capture_limit_ - capture_.size()));
  }
  Batch batch;
  EmitPassThrough(data, &batch);
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) {
      partial_.append(data.data(), data.size());
      if (partial_.size() >= kMaxLine) {
        EmitLine(partial_, LineEnd::kPiece, &batch);
        partial_.clear();
      }
      break;
    }
    if (partial_.empty()) {
      EmitLine(data.substr(0, nl), LineEnd::kNewline, &batch);
    } else {
      partial_.append(data.data(), nl);
      EmitLine(partial_, LineEnd::kNewline, &batch);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
  ShowUpdate(&batch);
  Write(batch);
}

void OutputStream::ShowUpdate(Batch* batch) {
  // Live \r updates (tqdm and the like): the text after the unfinished line's last \r is shown
  // now, whole, over the line on the console, not an hour later when the line ends. Without a
  // prefix on a pipe or a file, the bytes already went as they are (EmitPassThrough).
  if (config_.console_fd < 0 || continuing_ || PassesThrough()) return;
  const size_t cr = partial_.rfind('\r');
  if (cr == std::string::npos) return;
  absl::string_view update = absl::string_view(partial_).substr(cr + 1);
  if (update.empty() || update == shown_) return;
  absl::StrAppend(&batch->console, "\r", config_.prefix, update);
  shown_ = std::string(update);
}

void OutputStream::Write(const Batch& batch) {
  // One write each: whole lines, never cut by another worker's (one loop thread writes all).
  if (!batch.console.empty()) {
    if (config_.console_writer != nullptr) {
      config_.console_writer->Write(
          batch.console, this,
          batch.continues ? absl::string_view(config_.prefix) : absl::string_view());
    } else {
      WriteAll(config_.console_fd, batch.console);
    }
  }
  if (!batch.filtered.empty()) WriteAll(config_.filtered_fd, batch.filtered);
}

bool OutputStream::HasLineInProgress() const {
  if (config_.console_fd < 0) return false;
  if (PassesThrough()) return !passthrough_.empty();
  // A line redrawn with \r is shown at each redraw already (ShowUpdate).
  return partial_.size() > partial_shown_ && partial_.find('\r') == std::string::npos;
}

void OutputStream::FlushLineInProgress() {
  if (!HasLineInProgress()) return;
  Batch batch;
  if (PassesThrough()) {
    batch.console = std::move(passthrough_);
    passthrough_.clear();
  } else {
    const absl::string_view prefix = PrefixFor(&batch);
    absl::StrAppend(&batch.console, prefix, absl::string_view(partial_).substr(partial_shown_));
    partial_shown_ = partial_.size();
  }
  Write(batch);
}

void OutputStream::Finish() {
  Batch batch;
  if (!passthrough_.empty()) {  // the last bytes, as they are: no newline is added
    batch.console = std::move(passthrough_);
    passthrough_.clear();
  }
  if (!partial_.empty()) {
    // A redrawn line whose last update is on the console already (ShowUpdate) is not written
    // again on a pipe or a file.
    const size_t cr = partial_.rfind('\r');
    if (config_.console != Console::kTerminal && cr != std::string::npos && !shown_.empty() &&
        absl::string_view(partial_).substr(cr + 1) == shown_) {
      partial_shown_ = partial_.size();
    }
    // On a terminal the unfinished last line is ended (the shell's prompt starts on a line of
    // its own); elsewhere only the prefix is added.
    EmitLine(partial_, config_.console == Console::kTerminal ? LineEnd::kNewline : LineEnd::kPiece,
             &batch);
    partial_.clear();
  }
  Write(batch);
}

}  // namespace ddprun::launcher
