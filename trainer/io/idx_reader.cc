#include "trainer/io/idx_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ddprun::trainer {
namespace {

// Refuse absurd headers before allocating: the largest MNIST-style file is ~50 MB.
constexpr uint64_t kMaxElements = uint64_t{1} << 32;
constexpr int kMaxDims = 8;
constexpr uint8_t kTypeUnsignedByte = 0x08;

uint32_t ReadBigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

absl::StatusOr<IdxArray> ParseIdx(absl::string_view bytes, absl::string_view name) {
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
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  if (bytes.size() < header) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": truncated IDX header (", bytes.size(), " of ", header, " bytes)"));
  }
  IdxArray out;
  uint64_t elements = 1;
  for (int i = 0; i < ndim; ++i) {
    const uint32_t d = ReadBigEndian32(p + 4 + 4 * i);
    out.dims.push_back(d);
    elements *= d;
    if (elements > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": IDX dimensions too large"));
    }
  }
  const uint64_t have = bytes.size() - header;
  if (have < elements) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": truncated IDX file: header promises ",
                                                   elements, " bytes of data, file has ", have));
  }
  if (have > elements) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", have - elements, " unexpected trailing bytes after IDX data"));
  }
  out.data.assign(p + header, p + header + elements);
  return out;
}

absl::StatusOr<std::string> ReadMaybeGzipped(const std::string& path) {
  // gzread passes uncompressed files through unchanged, so one code path reads both.
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  gzbuffer(f, 1 << 20);
  std::string out;
  char buf[1 << 16];
  while (true) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int errnum = 0;
      std::string msg = gzerror(f, &errnum);
      gzclose_r(f);
      return absl::DataLossError(absl::StrCat(path, ": read error: ", msg));
    }
    if (n == 0) break;
    out.append(buf, n);
  }
  // A gzip stream cut short reads as EOF; gzclose_r reports it as Z_BUF_ERROR.
  const int rc = gzclose_r(f);
  if (rc == Z_BUF_ERROR) {
    return absl::DataLossError(absl::StrCat(path, ": truncated gzip stream"));
  }
  if (rc != Z_OK) {
    return absl::DataLossError(absl::StrCat(path, ": gzip error ", rc));
  }
  return out;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  DDPRUN_ASSIGN_OR_RETURN(std::string bytes, ReadMaybeGzipped(path));
  return ParseIdx(bytes, path);
}

}  // namespace ddprun::trainer
