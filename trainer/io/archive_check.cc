#include "trainer/io/archive_check.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "zlib.h"

namespace ddprun::trainer {
namespace {

// The zip format (APPNOTE.TXT): what ddp-train's archives use of it.
constexpr uint32_t kEndOfCentralDir = 0x06054b50;
constexpr uint32_t kZip64EndLocator = 0x07064b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr size_t kEndSize = 22, kCentralSize = 46, kLocalSize = 30, kLocatorSize = 20;
constexpr uint32_t kMax32 = 0xffffffff;
constexpr uint16_t kStored = 0, kDeflated = 8;
// LibTorch deflates its code records (a few KiB); nothing bigger is inflated.
constexpr uint64_t kMaxInflated = 1 << 20;

// Little-endian reads that fail (nullopt) past the end instead of reading beyond it.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  template <typename T>
  std::optional<T> At(uint64_t offset) const {
    if (offset > data_.size() || data_.size() - offset < sizeof(T)) return std::nullopt;
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      v |= static_cast<T>(static_cast<uint8_t>(data_[offset + i])) << (8 * i);
    }
    return v;
  }
  std::optional<absl::string_view> Bytes(uint64_t offset, uint64_t n) const {
    if (offset > data_.size() || data_.size() - offset < n) return std::nullopt;
    return data_.substr(offset, n);
  }
  uint64_t size() const { return data_.size(); }

 private:
  absl::string_view data_;
};

absl::Status Bad(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("not an archive of ddp-train's: ", why));
}

struct Directory {
  uint64_t entries = 0, offset = 0;
};

absl::StatusOr<Directory> FindDirectory(const Reader& r) {
  if (r.size() < kEndSize) return Bad("too short for a zip");
  // The end record is followed by a comment of at most 64 KiB.
  const uint64_t lowest = r.size() > kEndSize + 0xffff ? r.size() - kEndSize - 0xffff : 0;
  for (uint64_t at = r.size() - kEndSize + 1; at-- > lowest;) {
    if (r.At<uint32_t>(at) != kEndOfCentralDir) continue;
    Directory d{*r.At<uint16_t>(at + 10), *r.At<uint32_t>(at + 16)};
    if (d.entries == 0xffff || d.offset == kMax32) {
      const std::optional<uint64_t> end64 =
          at >= kLocatorSize && r.At<uint32_t>(at - kLocatorSize) == kZip64EndLocator
              ? r.At<uint64_t>(at - kLocatorSize + 8)
              : std::nullopt;
      if (!end64.has_value() || r.At<uint32_t>(*end64) != kZip64End) {
        return Bad("a zip64 directory without its end record");
      }
      d.entries = *r.At<uint64_t>(*end64 + 32);
      d.offset = *r.At<uint64_t>(*end64 + 48);
    }
    if (d.entries > r.size() / kCentralSize) return Bad("more records than the bytes can hold");
    return d;
  }
  return Bad("no end of central directory");
}

// A record's sizes and local header offset, with the zip64 extra field's values where the
// 32-bit fields say 0xffffffff.
struct Record {
  std::string name;
  uint16_t method = 0;
  uint64_t compressed = 0, size = 0, local = 0;
};

absl::StatusOr<Record> ReadRecord(const Reader& r, uint64_t* at) {
  if (r.At<uint32_t>(*at) != kCentralHeader) return Bad("a broken central directory");
  const std::optional<uint16_t> name_len = r.At<uint16_t>(*at + 28);
  const std::optional<uint16_t> extra_len = r.At<uint16_t>(*at + 30);
  const std::optional<uint16_t> comment_len = r.At<uint16_t>(*at + 32);
  if (!name_len || !extra_len || !comment_len) return Bad("a truncated central directory");
  const std::optional<absl::string_view> name = r.Bytes(*at + kCentralSize, *name_len);
  const std::optional<absl::string_view> extra =
      r.Bytes(*at + kCentralSize + *name_len, *extra_len);
  if (!name || !extra) return Bad("a truncated central directory");
  Record rec{std::string(*name), *r.At<uint16_t>(*at + 10), *r.At<uint32_t>(*at + 20),
             *r.At<uint32_t>(*at + 24), *r.At<uint32_t>(*at + 42)};
  Reader x(*extra);
  for (uint64_t e = 0; e + 4 <= extra->size();) {
    const uint16_t id = *x.At<uint16_t>(e), len = *x.At<uint16_t>(e + 2);
    if (id == 1) {  // zip64: uncompressed, compressed, local offset, as far as they overflowed
      uint64_t f = e + 4;
      for (uint64_t* v : {&rec.size, &rec.compressed, &rec.local}) {
        if (*v != kMax32) continue;
        const std::optional<uint64_t> wide = x.At<uint64_t>(f);
        if (!wide || f + 8 > e + 4 + len) return Bad("a broken zip64 field");
        *v = *wide;
        f += 8;
      }
    }
    e += 4 + len;
  }
  *at += kCentralSize + *name_len + *extra_len + *comment_len;
  return rec;
}

// The record's bytes, within the zip (stored records only).
absl::StatusOr<absl::string_view> Contents(const Reader& r, const Record& rec) {
  const std::optional<uint16_t> name_len = r.At<uint16_t>(rec.local + 26);
  const std::optional<uint16_t> extra_len = r.At<uint16_t>(rec.local + 28);
  if (r.At<uint32_t>(rec.local) != kLocalHeader || !name_len || !extra_len) {
    return Bad(absl::StrCat(rec.name, ": no local header"));
  }
  const std::optional<absl::string_view> data =
      r.Bytes(rec.local + kLocalSize + *name_len + *extra_len, rec.compressed);
  if (!data.has_value()) return Bad(absl::StrCat(rec.name, ": its bytes lie beyond the zip"));
  return *data;
}

// A deflated record's bytes, inflated into exactly its announced size, at most kMaxInflated.
absl::StatusOr<std::string> Inflate(absl::string_view deflated, const Record& rec) {
  if (rec.size > kMaxInflated) {
    return Bad(absl::StrCat(rec.name, ": a compressed record of ", rec.size, " bytes (at most ",
                            kMaxInflated, ")"));
  }
  std::string out(rec.size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return Bad("zlib");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(deflated.data()));
  z.avail_in = static_cast<uInt>(deflated.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != rec.size) {
    return Bad(absl::StrCat(rec.name, ": a compressed record that does not inflate to its size"));
  }
  return out;
}

bool DefinesAMethod(absl::string_view code) {
  for (absl::string_view line : absl::StrSplit(code, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (absl::StartsWith(line, "def ") || absl::StartsWith(line, "def\t") ||
        absl::StartsWith(line, "@")) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::Status CheckDataOnlyArchive(absl::string_view zip) {
  const Reader r(zip);
  absl::StatusOr<Directory> dir = FindDirectory(r);
  if (!dir.ok()) return dir.status();
  uint64_t at = dir->offset;
  for (uint64_t i = 0; i < dir->entries; ++i) {
    absl::StatusOr<Record> rec = ReadRecord(r, &at);
    if (!rec.ok()) return rec.status();
    const bool stored = rec->method == kStored && rec->compressed == rec->size;
    if (!stored && rec->method != kDeflated) {
      return Bad(absl::StrCat(rec->name, ": a record of compression method ", rec->method));
    }
    absl::StatusOr<absl::string_view> data = Contents(r, *rec);
    if (!data.ok()) return data.status();
    std::string inflated;
    if (!stored) {
      absl::StatusOr<std::string> out = Inflate(*data, *rec);
      if (!out.ok()) return out.status();
      inflated = std::move(*out);
      data = absl::string_view(inflated);
    }
    if (absl::StrContains(rec->name, "/code/") && absl::EndsWith(rec->name, ".py") &&
        DefinesAMethod(*data)) {
      return Bad(absl::StrCat(rec->name, ": TorchScript code with a method"));
    }
    if (absl::EndsWith(rec->name, ".pkl") && absl::StrContains(*data, "torch.classes")) {
      return Bad(absl::StrCat(rec->name, ": a TorchScript custom class"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ddprun::trainer
