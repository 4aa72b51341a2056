#include "trainer/io/checkpoint_store.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace ddprun::trainer {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'T', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = sizeof(kMagic) + 4 + 8 + 8;
constexpr size_t kTrailerSize = 4;
constexpr char kPrefix[] = "ckpt-";
constexpr char kSuffix[] = ".ddpt";
constexpr char kLatest[] = "LATEST";

template <typename T>
void PutLittleEndian(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <typename T>
T GetLittleEndian(const char* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

uint32_t Crc32(absl::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib's length is a uInt: feed large payloads in chunks.
  while (!data.empty()) {
    const size_t n = std::min<size_t>(data.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(n));
    data.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

// OK for a regular file (or a symlink to one). Anything else (a FIFO, whose open() would block
// until a writer comes, a device, a directory) is refused by stat() alone, without opening it.
absl::Status CheckRegularFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return absl::OkStatus();  // reading reports the error
  if (S_ISREG(st.st_mode)) return absl::OkStatus();
  const char* kind = S_ISFIFO(st.st_mode)                         ? "a FIFO"
                     : S_ISDIR(st.st_mode)                        ? "a directory"
                     : S_ISSOCK(st.st_mode)                       ? "a socket"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                  : "special";
  return absl::FailedPreconditionError(
      absl::StrCat(path, ": not a regular file (", kind, "); not opened"));
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, int keep, FileEnv* env)
    : dir_(std::move(dir)), keep_(std::max(keep, 1)), env_(env) {}

std::string CheckpointStore::FileName(int64_t step) {
  return absl::StrFormat("%s%012d%s", kPrefix, step, kSuffix);
}

std::string CheckpointStore::Encode(int64_t step, absl::string_view payload) {
  std::string out;
  out.reserve(kHeaderSize + payload.size() + kTrailerSize);
  out.append(kMagic, sizeof(kMagic));
  PutLittleEndian<uint32_t>(out, kVersion);
  PutLittleEndian<uint64_t>(out, static_cast<uint64_t>(step));
  PutLittleEndian<uint64_t>(out, payload.size());
  out.append(payload.data(), payload.size());
  PutLittleEndian<uint32_t>(out, Crc32(absl::string_view(out).substr(sizeof(kMagic))));
  return out;
}

absl::StatusOr<LoadedCheckpoint> CheckpointStore::Decode(absl::string_view bytes,
                                                         const std::string& path) {
  if (bytes.size() < kHeaderSize + kTrailerSize ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    if (bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
      return absl::DataLossError(absl::StrCat(path, ": not a ddp-train checkpoint (bad magic)"));
    }
    return absl::DataLossError(
        absl::StrCat(path, ": truncated checkpoint (", bytes.size(), " bytes)"));
  }
  const char* p = bytes.data() + sizeof(kMagic);
  const uint32_t version = GetLittleEndian<uint32_t>(p);
  const uint64_t step = GetLittleEndian<uint64_t>(p + 4);
  const uint64_t length = GetLittleEndian<uint64_t>(p + 12);
  if (version != kVersion) {
    return absl::DataLossError(
        absl::StrCat(path, ": checkpoint format version ", version, " not supported"));
  }
  if (length != bytes.size() - kHeaderSize - kTrailerSize) {
    return absl::DataLossError(absl::StrCat(path, ": torn checkpoint: header says ", length,
                                            " payload bytes, file has ",
                                            bytes.size() - kHeaderSize - kTrailerSize));
  }
  const uint32_t want = GetLittleEndian<uint32_t>(bytes.data() + bytes.size() - kTrailerSize);
  const uint32_t got =
      Crc32(bytes.substr(sizeof(kMagic), bytes.size() - sizeof(kMagic) - kTrailerSize));
  if (want != got) {
    return absl::DataLossError(
        absl::StrFormat("%s: checksum mismatch (stored %08x, computed %08x)", path, want, got));
  }
  LoadedCheckpoint out;
  out.step = static_cast<int64_t>(step);
  out.path = path;
  out.payload = std::string(bytes.substr(kHeaderSize, length));
  return out;
}

absl::Status CheckpointStore::CheckWritable() {
  absl::Status s = env_->CreateDirs(dir_);
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint directory ", dir_, " is not usable: ", s.message()));
  }
  const std::string probe = absl::StrCat(dir_, "/.write-probe");
  s = WriteFileAtomically(env_, probe, "probe\n");
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint directory ", dir_, " is not writable: ", s.message()));
  }
  return env_->RemoveFile(probe);
}

absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> CheckpointStore::ListCheckpoints() {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!env_->FileExists(dir_)) return out;
  DDPRUN_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(dir_));
  for (const std::string& name : names) {
    absl::string_view v = name;
    if (!absl::ConsumePrefix(&v, kPrefix) || !absl::ConsumeSuffix(&v, kSuffix)) continue;
    int64_t step = 0;
    if (!absl::SimpleAtoi(v, &step)) continue;
    out.emplace_back(step, name);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

absl::Status CheckpointStore::Save(int64_t step, absl::string_view payload) {
  const std::string name = FileName(step);
  DDPRUN_RETURN_IF_ERROR(env_->CreateDirs(dir_));
  DDPRUN_RETURN_IF_ERROR(
      WriteFileAtomically(env_, absl::StrCat(dir_, "/", name), Encode(step, payload)));
  DDPRUN_RETURN_IF_ERROR(
      WriteFileAtomically(env_, absl::StrCat(dir_, "/", kLatest), absl::StrCat(name, "\n")));
  // Prune only after the new checkpoint and the pointer are durable.
  DDPRUN_ASSIGN_OR_RETURN(auto all, ListCheckpoints());
  for (size_t i = keep_; i < all.size(); ++i) {
    env_->RemoveFile(absl::StrCat(dir_, "/", all[i].second)).IgnoreError();
  }
  return absl::OkStatus();
}

bool CheckpointStore::HasCheckpoint() {
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> all = ListCheckpoints();
  return all.ok() && !all->empty();
}

absl::StatusOr<std::optional<LoadedCheckpoint>> CheckpointStore::LoadLatest() {
  DDPRUN_ASSIGN_OR_RETURN(auto all, ListCheckpoints());
  std::vector<std::string> order;
  std::vector<std::string> warnings;
  // The pointer names the newest complete checkpoint; the scan (newest first) is the fallback
  // when the pointer is missing, stale or names a damaged file.
  const std::string latest_path = absl::StrCat(dir_, "/", kLatest);
  absl::Status regular = CheckRegularFile(latest_path);
  if (!regular.ok()) {
    warnings.push_back(absl::StrCat("ignoring ", regular.message(), "; scanning the directory"));
  }
  absl::StatusOr<std::string> latest =
      regular.ok() ? env_->ReadFile(latest_path) : absl::StatusOr<std::string>(regular);
  if (latest.ok()) {
    std::string name(absl::StripAsciiWhitespace(*latest));
    if (std::any_of(all.begin(), all.end(), [&](const auto& e) { return e.second == name; })) {
      order.push_back(name);
    } else if (!all.empty()) {
      warnings.push_back(absl::StrCat(dir_, "/", kLatest, " names missing file '", name,
                                      "'; scanning the directory"));
    }
  }
  for (const auto& [step, name] : all) {
    if (order.empty() || name != order.front()) order.push_back(name);
  }
  for (const std::string& name : order) {
    const std::string path = absl::StrCat(dir_, "/", name);
    absl::Status regular = CheckRegularFile(path);
    absl::StatusOr<std::string> bytes =
        regular.ok() ? env_->ReadFile(path) : absl::StatusOr<std::string>(regular);
    absl::StatusOr<LoadedCheckpoint> loaded =
        bytes.ok() ? Decode(*bytes, path) : absl::StatusOr<LoadedCheckpoint>(bytes.status());
    if (loaded.ok()) {
      loaded->warnings = std::move(warnings);
      return std::optional<LoadedCheckpoint>(*std::move(loaded));
    }
    warnings.push_back(absl::StrCat("skipping checkpoint: ", loaded.status().message()));
  }
  if (all.empty()) return std::optional<LoadedCheckpoint>();
  std::string msg = absl::StrCat("no valid checkpoint in ", dir_, ":");
  for (const std::string& w : warnings) absl::StrAppend(&msg, " ", w, ";");
  return absl::DataLossError(msg);
}

}  // namespace ddprun::trainer
