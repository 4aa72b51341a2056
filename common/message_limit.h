// The one limit on the size of a message ddprun carries, and the one way to cut a message to it.
// A message is text a person reads that crosses a component: a worker's failure message (the
// agent's summary, the failure sent to the rendezvous, the server's run state), a reason for
// leaving. A structured message (a step event's JSON) is never cut, since a cut object is no
// JSON: its text fields are abbreviated where it is made, and one still larger than
// kMaxStructuredMessageBytes is dropped whole. Pure; thread-safe.
#ifndef DDPRUN_COMMON_MESSAGE_LIMIT_H_
#define DDPRUN_COMMON_MESSAGE_LIMIT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ddprun {

inline constexpr size_t kMaxMessageBytes = 4096;
// A JSON object with one abbreviated message and a few short fields.
inline constexpr size_t kMaxStructuredMessageBytes = 2 * kMaxMessageBytes;

// `text` when it is at most `max_bytes` long; else its first bytes, cut on a UTF-8 character's
// boundary, then " ... (N more bytes)" or, with `where_whole`, " ... (N more bytes; WHERE_WHOLE)"
// ("the whole text is in the error file").
std::string AbbreviateMessage(absl::string_view text, absl::string_view where_whole = "",
                              size_t max_bytes = kMaxMessageBytes);

}  // namespace ddprun

#endif  // DDPRUN_COMMON_MESSAGE_LIMIT_H_
