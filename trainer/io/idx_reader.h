// Reader for the IDX format of MNIST / Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
// a 4-byte magic (0, 0, type, ndim), ndim big-endian uint32 dimensions, then the data.
// Only unsigned-byte data (type 0x08) is accepted. Files may be gzipped (detected by content,
// not by name). Every error message names the file.
#ifndef DDPRUN_TRAINER_IO_IDX_READER_H_
#define DDPRUN_TRAINER_IO_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddprun::trainer {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> data;  // row-major, product(dims) bytes
};

// Parses IDX bytes already in memory; `name` is used in error messages.
// kInvalidArgument on a wrong magic, a truncated body or trailing bytes.
absl::StatusOr<IdxArray> ParseIdx(absl::string_view bytes, absl::string_view name);

// Reads (and gunzips when compressed) `path` and parses it, streaming: decompression stops at
// the size the header declares, so a gzip bomb cannot take more memory than that, and a header
// declaring more than 4 GiB is refused before any data is read. kNotFound when missing,
// kInvalidArgument for a non-regular file (never opened so as to block: FIFOs are refused).
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path);

// Whole file contents, transparently gunzipped; kInvalidArgument beyond `max_bytes`
// decompressed. kNotFound / kDataLoss (truncated gzip).
absl::StatusOr<std::string> ReadMaybeGzipped(const std::string& path,
                                             uint64_t max_bytes = uint64_t{4} << 30);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_IDX_READER_H_
