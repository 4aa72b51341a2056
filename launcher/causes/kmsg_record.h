// One record of /dev/kmsg (the kernel's Documentation/ABI/testing/dev-kmsg): every read() of
// the device returns one whole record, "PRI,SEQ,TS_USEC,FLAGS[,MORE...];TEXT\n", followed by
// continuation lines that start with a space (" SUBSYSTEM=pci"). Pure.
#ifndef DDPRUN_LAUNCHER_CAUSES_KMSG_RECORD_H_
#define DDPRUN_LAUNCHER_CAUSES_KMSG_RECORD_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ddprun::launcher {

struct KmsgRecord {
  int facility = 0;  // PRI >> 3
  int level = 0;     // PRI & 7
  uint64_t seq = 0;
  // Microseconds since boot on the kernel's local clock, which on a machine that never
  // suspends stays close to CLOCK_MONOTONIC: match it against a worker's life with slack.
  int64_t timestamp_us = 0;
  std::string text;  // the message, with the kernel's \xNN escapes undone

  // Written by the kernel itself: userspace may write records to /dev/kmsg, but never with
  // facility 0 (LOG_KERN), so an "Out of memory" line from anything else is not evidence.
  bool from_kernel() const { return facility == 0; }
};

// nullopt for anything that is not a record (a header without its four fields, no ';').
// Fields after the fourth are ignored, as the format asks of readers.
std::optional<KmsgRecord> ParseKmsgRecord(absl::string_view raw);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CAUSES_KMSG_RECORD_H_
