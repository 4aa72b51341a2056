// Minimal logging for the launcher and the rendezvous daemon: one line per call to stderr,
// "[ddprun HH:MM:SS.mmm] message", written with a single write(2) so lines from several
// processes never interleave mid-line. (Abseil 20220623 has no absl/log; glog would add start-up
// cost and its own flags to a binary whose point is starting fast.)
#ifndef DDPRUN_COMMON_LOG_H_
#define DDPRUN_COMMON_LOG_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ddprun {

// Sets the tag printed in each line ("ddprun", "ddprun-rdzv"). Call once from main.
void SetLogTag(absl::string_view tag);
// When false, Info() is dropped (warnings and errors are always printed).
void SetVerbose(bool verbose);
bool Verbose();

void LogInfo(absl::string_view message);
void LogWarning(absl::string_view message);
void LogError(absl::string_view message);

// Where log lines go instead of a write(2) to stderr: the agent queues them behind its workers'
// stderr output (launcher/workers/console_writer.h), so that its own lines keep their order
// and never block its loop on a stderr nobody reads. Thread-safe; nullptr restores stderr.
class LogSink {
 public:
  virtual ~LogSink() = default;
  virtual void WriteLine(std::string line) = 0;
};
void SetLogSink(LogSink* sink);

// Writes `text` to `fd` completely (retrying short writes and EINTR). Returns false on error.
bool WriteAll(int fd, absl::string_view text);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_LOG_H_
