#include "common/log.h"

#include <errno.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "common/strings.h"

namespace ddprun {
namespace {

// Written once from main before threads start, read afterwards: no lock needed.
std::string& Tag() {
  static std::string* tag = new std::string("ddprun");
  return *tag;
}
std::atomic<bool> g_verbose{true};
std::atomic<LogSink*> g_sink{nullptr};

void Emit(absl::string_view level, absl::string_view message) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  char stamp[32];
  snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%03d", local.tm_hour, local.tm_min, local.tm_sec,
           static_cast<int>(tv.tv_usec / 1000));
  // One line, whatever the message carries: foreign text in it (a worker's error, another
  // node's failure message) cannot forge a line of its own or steer the terminal.
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  std::string line = absl::StrCat("[", Tag(), " ", stamp, "] ", level, Printable(message), "\n");
  if (LogSink* sink = g_sink.load()) {
    sink->WriteLine(std::move(line));
  } else {
    WriteAll(2, line);
  }
}

}  // namespace

void SetLogSink(LogSink* sink) { g_sink.store(sink); }

void SetLogTag(absl::string_view tag) { Tag() = std::string(tag); }
void SetVerbose(bool verbose) { g_verbose = verbose; }
bool Verbose() { return g_verbose; }

void LogInfo(absl::string_view message) {
  if (g_verbose) Emit("", message);
}
void LogWarning(absl::string_view message) { Emit("WARNING: ", message); }
void LogError(absl::string_view message) { Emit("ERROR: ", message); }

bool WriteAll(int fd, absl::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace ddprun
