#include "common/message_limit.h"

#include "absl/strings/str_cat.h"

namespace ddprun {

std::string AbbreviateMessage(absl::string_view text, absl::string_view where_whole,
                              size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back to the first byte of a character: never half a character (the metrics' exposition
  // format and JSON want valid UTF-8).
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(text.substr(0, cut), " ... (", text.size() - cut, " more bytes",
                      where_whole.empty() ? "" : "; ", where_whole, ")");
}

}  // namespace ddprun
