#include "launcher/agent/failure_report.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_text.h"
#include "common/log.h"
#include "common/strings.h"
#include "launcher/agent/failure_record.h"
#include "launcher/workers/error_file_relay.h"

namespace ddprun::launcher {

std::string DescribeExit(const WorkerExit& exit) {
  if (!exit.hang.empty()) return absl::StrCat("hung: ", exit.hang);
  if (exit.signal != 0) {
    return absl::StrCat("signal ", SignalNameAndNumber(exit.signal),
                        exit.cause.text.empty() ? "" : ": ", exit.cause.text);
  }
  if (KindOf(exit) == FailureKind::kNeverStarted) return "exit code 0 before it started";
  return absl::StrCat("exit code ", exit.exit_code);
}

std::optional<ErrorFileContents> ReadErrorFile(const std::string& path) {
  if (path.empty()) return std::nullopt;
  absl::StatusOr<std::string> text = ReadBoundedFile(path, kMaxErrorFileBytes);
  if (!text.ok()) {
    // The worker controls this file: a FIFO, a directory or a huge file is its doing, not ours.
    if (!absl::IsNotFound(text.status())) {
      LogWarning(absl::StrCat("ignoring the error file: ", text.status().message()));
    }
    return std::nullopt;
  }
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return std::nullopt;
  ErrorFileContents c;
  auto get_string = [](const nlohmann::json& j, const char* key) -> std::string {
    auto it = j.find(key);
    if (it == j.end()) return "";
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  auto msg = doc.find("message");
  if (msg == doc.end()) return std::nullopt;
  if (msg->is_string()) {
    c.message = msg->get<std::string>();
  } else if (msg->is_object()) {
    c.message = get_string(*msg, "message");
    auto extra = msg->find("extraInfo");
    if (extra != msg->end() && extra->is_object()) {
      c.traceback = get_string(*extra, "py_callstack");
      c.timestamp = get_string(*extra, "timestamp");
    }
  }
  return c;
}

std::string Abbreviate(const std::string& text, size_t max_bytes) {
  return AbbreviateMessage(text, "the whole text is in the error file", max_bytes);
}

namespace {

void AppendIndented(std::string* out, const std::string& text, const char* indent,
                    size_t max_lines) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  if (first > 0) absl::StrAppend(out, indent, "... (", first, " earlier lines)\n");
  for (size_t i = first; i < lines.size(); ++i) {
    absl::StrAppend(out, indent, Printable(Abbreviate(lines[i], 512)), "\n");
  }
}

}  // namespace

std::string FormatFailureReport(const FailureReport& r) {
  std::string out = "\n================ ddprun: job failed ================\n";
  // Every line below that quotes a worker (its error file, its stderr, its stacks) or another
  // node goes through Printable: one line each, no terminal escapes obeyed.
  absl::StrAppend(&out, Printable(r.headline), "\n");
  if (r.max_restarts > 0 || r.restarts_used > 0) {
    absl::StrAppend(&out, "restarts used: ", r.restarts_used, " of ", r.max_restarts, "\n");
  }
  if (r.root_cause.has_value()) {
    const WorkerExit& e = *r.root_cause;
    absl::StrAppend(&out, "root cause (first failure):\n");
    absl::StrAppend(&out, "  host:        ", r.hostname, "\n");
    absl::StrAppend(&out, "  rank:        ", e.rank, " (local rank ", e.local_rank, ")\n");
    absl::StrAppend(&out, "  pid:         ", e.pid, "\n");
    absl::StrAppend(&out, "  exit:        ", DescribeExit(e), "\n");
    if (!r.start_error.empty()) {
      absl::StrAppend(&out, "  start error: ", Printable(r.start_error), "\n");
    }
    if (r.error.has_value()) {
      absl::StrAppend(&out, "  error file:  ", r.error_file, "\n");
      absl::StrAppend(&out, "  error:       ", Printable(Abbreviate(r.error->message)), "\n");
      if (!r.error->traceback.empty()) {
        absl::StrAppend(&out, "  traceback:\n");
        AppendIndented(&out, r.error->traceback, "    ", 30);
      }
    }
    if (!r.stacks_file.empty()) {
      absl::StrAppend(&out, "  stacks:      ", r.stacks_file, "\n");
      if (!r.innermost_frames.empty()) {
        absl::StrAppend(&out, "  where it was (innermost frames first):\n");
        for (const auto& f : r.innermost_frames) {
          absl::StrAppend(&out, "    | ", Printable(f), "\n");
        }
      }
    }
    if (!r.stderr_tail.empty()) {
      absl::StrAppend(&out, "  last lines of its stderr:\n");
      for (const auto& line : r.stderr_tail) {
        absl::StrAppend(&out, "    | ", Printable(line), "\n");
      }
    }
  }
  if (!r.straggler.empty()) {
    absl::StrAppend(&out, "straggler (lowest step, then oldest progress, all nodes): ",
                    Printable(r.straggler), "\n");
  }
  if (!r.other_failures.empty()) {
    absl::StrAppend(&out, "other failures in that attempt:\n");
    for (const auto& e : r.other_failures) {
      absl::StrAppend(&out, "  rank ", e.rank, " (local rank ", e.local_rank, ", pid ", e.pid,
                      "): ", DescribeExit(e), "\n");
    }
  }
  absl::StrAppend(&out, "====================================================\n");
  return out;
}

}  // namespace ddprun::launcher
