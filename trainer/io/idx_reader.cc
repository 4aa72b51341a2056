#include "trainer/io/idx_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ddprun::trainer {
namespace {

// Refuse absurd headers before allocating or reading: the largest MNIST-style file is ~50 MB.
constexpr uint64_t kMaxElements = uint64_t{4} << 30;
constexpr int kMaxDims = 8;
constexpr uint8_t kTypeUnsignedByte = 0x08;

uint32_t ReadBigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxHeader {
  std::vector<int64_t> dims;
  uint64_t elements = 1;  // bytes of data that follow (one byte per element)
  size_t size = 0;        // bytes of header
};

// Parses the header at the start of `bytes` (which may hold more, or be cut short).
absl::StatusOr<IdxHeader> ParseIdxHeader(absl::string_view bytes, absl::string_view name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not an IDX file (", bytes.size(),
                                                   " bytes, shorter than the header)"));
  }
  if (p[0] != 0 || p[1] != 0 || p[3] == 0 || p[3] > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": wrong magic number 0x", absl::Hex(ReadBigEndian32(p), absl::kZeroPad8),
        " (expected 0x000008NN for an IDX file of unsigned bytes)"));
  }
  if (p[2] != kTypeUnsignedByte) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": IDX data type 0x",
                                                   absl::Hex(p[2], absl::kZeroPad2),
                                                   " not supported (only 0x08)"));
  }
  const int ndim = p[3];
  IdxHeader h;
  h.size = 4 + 4 * static_cast<size_t>(ndim);
  if (bytes.size() < h.size) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": truncated IDX header (", bytes.size(), " of ", h.size, " bytes)"));
  }
  // Each dimension is < 2^32 and the running product stays <= kMaxElements until checked, so
  // the exact product (at most 2^32 * 2^32 per step) is computed in 128 bits to report it.
  unsigned __int128 product = 1;
  for (int i = 0; i < ndim; ++i) {
    const uint32_t d = ReadBigEndian32(p + 4 + 4 * i);
    h.dims.push_back(d);
    product *= d;
    if (product > kMaxElements) {
      // Keep multiplying (saturating) only for the message.
      for (int j = i + 1; j < ndim && product <= (~static_cast<unsigned __int128>(0) >> 32); ++j) {
        product *= ReadBigEndian32(p + 4 + 4 * j);
      }
      std::string dims;
      for (int j = 0; j < ndim; ++j) {
        absl::StrAppend(&dims, j == 0 ? "" : "x", ReadBigEndian32(p + 4 + 4 * j));
      }
      const uint64_t claimed = product > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(product);
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": IDX header claims dimensions ", dims, " = ", claimed,
          " bytes of data, too large (limit ", kMaxElements, " bytes); not a valid IDX file"));
    }
  }
  h.elements = static_cast<uint64_t>(product);
  return h;
}

class GzFile {
 public:
  explicit GzFile(gzFile f) : f_(f) {}
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  ~GzFile() {
    if (f_ != nullptr) gzclose_r(f_);
  }
  gzFile get() const { return f_; }
  // Closes; a gzip stream cut short reads as EOF and is reported here as kDataLoss.
  absl::Status Close(const std::string& path) {
    const int rc = gzclose_r(f_);
    f_ = nullptr;
    if (rc == Z_BUF_ERROR)
      return absl::DataLossError(absl::StrCat(path, ": truncated gzip stream"));
    if (rc != Z_OK) return absl::DataLossError(absl::StrCat(path, ": gzip error ", rc));
    return absl::OkStatus();
  }

 private:
  gzFile f_;
};

// Opens `path` for gzread (which passes uncompressed files through unchanged). Refuses anything
// but a regular file without blocking on it (a FIFO would block open and read forever).
absl::StatusOr<gzFile> OpenMaybeGzipped(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  gzFile f = gzdopen(fd, "rb");
  if (f == nullptr) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot open: out of memory"));
  }
  gzbuffer(f, 1 << 20);
  return f;
}

// Reads up to `n` bytes (fewer only at EOF) into `out`; returns how many.
absl::StatusOr<size_t> ReadFully(gzFile f, char* out, size_t n, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 20));
    const int r = gzread(f, out + got, chunk);
    if (r < 0) {
      int errnum = 0;
      return absl::DataLossError(absl::StrCat(path, ": read error: ", gzerror(f, &errnum)));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

absl::StatusOr<IdxArray> ParseIdx(absl::string_view bytes, absl::string_view name) {
  DDPRUN_ASSIGN_OR_RETURN(IdxHeader h, ParseIdxHeader(bytes, name));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const uint64_t have = bytes.size() - h.size;
  if (have < h.elements) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": truncated IDX file: header promises ",
                                                   h.elements, " bytes of data, file has ", have));
  }
  if (have > h.elements) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", have - h.elements, " unexpected trailing bytes after IDX data"));
  }
  IdxArray out;
  out.dims = std::move(h.dims);
  out.data.assign(p + h.size, p + h.size + h.elements);
  return out;
}

absl::StatusOr<std::string> ReadMaybeGzipped(const std::string& path, uint64_t max_bytes) {
  DDPRUN_ASSIGN_OR_RETURN(gzFile raw, OpenMaybeGzipped(path));
  GzFile f(raw);
  std::string out;
  char buf[1 << 16];
  while (true) {
    DDPRUN_ASSIGN_OR_RETURN(size_t n, ReadFully(f.get(), buf, sizeof(buf), path));
    if (n == 0) break;
    if (out.size() + n > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": more than ", max_bytes, " bytes (decompressed); refused"));
    }
    out.append(buf, n);
  }
  DDPRUN_RETURN_IF_ERROR(f.Close(path));
  return out;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  // Streams: the header bounds how much is decompressed, so a gzip bomb (or a file with
  // trailing garbage) costs no more memory than the data its header honestly declares.
  DDPRUN_ASSIGN_OR_RETURN(gzFile raw, OpenMaybeGzipped(path));
  GzFile f(raw);
  std::string header(4 + 4 * kMaxDims, '\0');
  size_t asked = 4;
  DDPRUN_ASSIGN_OR_RETURN(size_t got, ReadFully(f.get(), header.data(), 4, path));
  if (got == 4 && header[0] == 0 && header[1] == 0) {
    const size_t rest = 4 * std::min<size_t>(static_cast<unsigned char>(header[3]), kMaxDims);
    asked += rest;
    DDPRUN_ASSIGN_OR_RETURN(size_t more, ReadFully(f.get(), header.data() + 4, rest, path));
    got += more;
  }
  header.resize(got);
  absl::StatusOr<IdxHeader> h = ParseIdxHeader(header, path);
  if (!h.ok()) {
    if (got < asked) DDPRUN_RETURN_IF_ERROR(f.Close(path));  // a truncated gzip stream?
    return h.status();
  }
  IdxArray out;
  out.dims = std::move(h->dims);
  // Grow with the data actually read rather than trusting the header up front.
  uint64_t have = 0;
  while (have < h->elements) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(h->elements - have, 1u << 24));
    if (out.data.capacity() < have + want) {
      out.data.reserve(std::min<uint64_t>(h->elements, std::max<uint64_t>(2 * have, have + want)));
    }
    out.data.resize(have + want);
    DDPRUN_ASSIGN_OR_RETURN(
        size_t n, ReadFully(f.get(), reinterpret_cast<char*>(out.data.data()) + have, want, path));
    have += n;
    if (n < want) break;
  }
  if (have < h->elements) {
    DDPRUN_RETURN_IF_ERROR(f.Close(path));
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated IDX file: header promises ",
                                                   h->elements, " bytes of data, file has ", have));
  }
  out.data.resize(have);
  char extra[1];
  DDPRUN_ASSIGN_OR_RETURN(size_t n, ReadFully(f.get(), extra, 1, path));
  if (n != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unexpected trailing bytes after the ", h->elements,
                     " bytes of IDX data its header declares (stopped reading there)"));
  }
  DDPRUN_RETURN_IF_ERROR(f.Close(path));
  return out;
}

}  // namespace ddprun::trainer
