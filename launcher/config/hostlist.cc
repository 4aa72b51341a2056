#include "launcher/config/hostlist.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddprun::launcher {
namespace {

// Digits beyond this would overflow int64 arithmetic; no real node name needs them.
constexpr size_t kMaxDigits = 18;

// One piece of an entry: its alternatives (one for plain text, several for a bracket).
using Piece = std::vector<std::string>;

class Parser {
 public:
  explicit Parser(absl::string_view list) : list_(list) {}

  absl::StatusOr<std::vector<std::string>> Expand(bool first_only) {
    std::vector<std::string> hosts;
    if (list_.empty()) return Error("the list is empty", 0);
    while (true) {
      std::vector<Piece> pieces;
      const size_t entry_start = pos_;
      size_t product = 1;
      while (pos_ < list_.size() && list_[pos_] != ',') {
        Piece piece;
        if (list_[pos_] == '[') {
          absl::StatusOr<Piece> bracket = ParseBracket();
          if (!bracket.ok()) return bracket.status();
          piece = std::move(*bracket);
        } else {
          absl::StatusOr<std::string> text = ParseText();
          if (!text.ok()) return text.status();
          piece.push_back(std::move(*text));
        }
        product *= piece.size();
        if (product + hosts.size() > kMaxHostlistHosts) {
          return Error(absl::StrCat("expands to more than ", kMaxHostlistHosts, " hosts"),
                       entry_start);
        }
        pieces.push_back(std::move(piece));
      }
      if (pieces.empty()) return Error("empty host name", pos_);
      if (!first_only || hosts.empty()) AppendProduct(pieces, &hosts);
      if (pos_ == list_.size()) break;
      ++pos_;  // the ','
      if (pos_ == list_.size()) return Error("empty host name after ','", pos_);
    }
    return hosts;
  }

 private:
  absl::Status Error(absl::string_view why, size_t at) const {
    return absl::InvalidArgumentError(
        absl::StrCat("hostlist '", list_, "': ", why, " at position ", at));
  }

  static bool IsNameChar(char c) {
    // Host names are letters, digits, '-', '.', '_'; anything else (spaces, quotes, control
    // bytes) is a sign the variable is not a node list at all.
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  }

  absl::StatusOr<std::string> ParseText() {
    const size_t start = pos_;
    while (pos_ < list_.size() && IsNameChar(list_[pos_])) ++pos_;
    if (pos_ == start) {
      const char c = list_[pos_];
      if (c == ']') return Error("']' without '['", pos_);
      return Error(absl::StrCat("unexpected character ", Quote(c)), pos_);
    }
    return std::string(list_.substr(start, pos_ - start));
  }

  static std::string Quote(char c) {
    if (absl::ascii_isprint(static_cast<unsigned char>(c)))
      return absl::StrCat("'", std::string(1, c), "'");
    static const char kHex[] = "0123456789abcdef";
    const unsigned v = static_cast<unsigned char>(c);
    return absl::StrCat("byte 0x", std::string(1, kHex[v >> 4]), std::string(1, kHex[v & 15]));
  }

  // At '['. Returns the expanded alternatives of "[r1,r2,...]".
  absl::StatusOr<Piece> ParseBracket() {
    const size_t open = pos_++;
    Piece out;
    while (true) {
      if (pos_ == list_.size()) return Error("unterminated '['", open);
      const size_t lo_at = pos_;
      absl::StatusOr<std::string> lo = ParseNumber();
      if (!lo.ok()) return lo.status();
      std::string hi = *lo;
      if (pos_ < list_.size() && list_[pos_] == '-') {
        ++pos_;
        absl::StatusOr<std::string> h = ParseNumber();
        if (!h.ok()) return h.status();
        hi = *h;
      }
      uint64_t lo_v = 0, hi_v = 0;
      for (char c : *lo) lo_v = lo_v * 10 + (c - '0');
      for (char c : hi) hi_v = hi_v * 10 + (c - '0');
      if (lo_v > hi_v) {
        return Error(absl::StrCat("range ", *lo, "-", hi, " runs backwards"), lo_at);
      }
      if (hi_v - lo_v + 1 + out.size() > kMaxHostlistHosts) {
        return Error(absl::StrCat("expands to more than ", kMaxHostlistHosts, " hosts"), lo_at);
      }
      for (uint64_t v = lo_v; v <= hi_v; ++v) out.push_back(Padded(v, lo->size()));
      if (pos_ == list_.size()) return Error("unterminated '['", open);
      if (list_[pos_] == ']') {
        ++pos_;
        return out;
      }
      if (list_[pos_] != ',') {
        return Error(absl::StrCat("expected ',', '-' or ']' but found ", Quote(list_[pos_])), pos_);
      }
      ++pos_;
    }
  }

  absl::StatusOr<std::string> ParseNumber() {
    const size_t start = pos_;
    while (pos_ < list_.size() && absl::ascii_isdigit(static_cast<unsigned char>(list_[pos_]))) {
      ++pos_;
    }
    if (pos_ == start) {
      if (pos_ == list_.size()) return Error("expected a number", pos_);
      return Error(absl::StrCat("expected a number but found ", Quote(list_[pos_])), pos_);
    }
    if (pos_ - start > kMaxDigits) return Error("number too long", start);
    return std::string(list_.substr(start, pos_ - start));
  }

  static std::string Padded(uint64_t v, size_t width) {
    std::string digits = absl::StrCat(v);
    if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
    return digits;
  }

  static void AppendProduct(const std::vector<Piece>& pieces, std::vector<std::string>* out) {
    std::vector<std::string> acc = {""};
    for (const Piece& piece : pieces) {
      std::vector<std::string> next;
      next.reserve(acc.size() * piece.size());
      for (const std::string& head : acc) {
        for (const std::string& alt : piece) next.push_back(head + alt);
      }
      acc = std::move(next);
    }
    out->insert(out->end(), acc.begin(), acc.end());
  }

  absl::string_view list_;
  size_t pos_ = 0;
};

// "gpu-a07" -> prefix "gpu-a", digits "07". Names without trailing digits (or with too many to
// hold) have no numeric part and are written as they are.
struct NameParts {
  std::string prefix;
  std::string digits;
  uint64_t value = 0;
};

NameParts Split(const std::string& host) {
  size_t i = host.size();
  while (i > 0 && absl::ascii_isdigit(static_cast<unsigned char>(host[i - 1]))) --i;
  NameParts p;
  p.prefix = host.substr(0, i);
  p.digits = host.substr(i);
  if (p.digits.size() > kMaxDigits) {
    p.prefix = host;
    p.digits.clear();
  }
  for (char c : p.digits) p.value = p.value * 10 + (c - '0');
  return p;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view list) {
  return Parser(list).Expand(/*first_only=*/false);
}

absl::StatusOr<std::string> FirstHost(absl::string_view list) {
  absl::StatusOr<std::vector<std::string>> hosts = Parser(list).Expand(/*first_only=*/true);
  if (!hosts.ok()) return hosts.status();
  return hosts->front();
}

std::string FormatHostlist(const std::vector<std::string>& hosts) {
  // Runs of hosts with the same prefix and digit count whose numbers go up by one become one
  // range; consecutive runs with the same prefix and width share one bracket. Order is kept.
  std::vector<std::string> entries;
  size_t i = 0;
  while (i < hosts.size()) {
    const NameParts first = Split(hosts[i]);
    if (first.digits.empty()) {
      entries.push_back(hosts[i++]);
      continue;
    }
    std::vector<std::string> ranges;
    while (i < hosts.size()) {
      const NameParts lo = Split(hosts[i]);
      if (lo.digits.empty() || lo.prefix != first.prefix ||
          lo.digits.size() != first.digits.size()) {
        break;
      }
      size_t j = i + 1;
      uint64_t last = lo.value;
      while (j < hosts.size()) {
        const NameParts next = Split(hosts[j]);
        if (next.digits.empty() || next.prefix != lo.prefix ||
            next.digits.size() != lo.digits.size() || next.value != last + 1) {
          break;
        }
        last = next.value;
        ++j;
      }
      ranges.push_back(j - i == 1 ? lo.digits
                                  : absl::StrCat(lo.digits, "-", Split(hosts[j - 1]).digits));
      i = j;
    }
    if (ranges.size() == 1 && ranges[0].find('-') == std::string::npos) {
      entries.push_back(absl::StrCat(first.prefix, ranges[0]));
    } else {
      entries.push_back(absl::StrCat(first.prefix, "[", absl::StrJoin(ranges, ","), "]"));
    }
  }
  return absl::StrJoin(entries, ",");
}

}  // namespace ddprun::launcher
