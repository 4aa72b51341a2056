// JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libpng) decoding to 8-bit RGB, HWC.
//
// JPEGs can be decoded scaled down by 2, 4 or 8 inside the IDCT, which is several times faster
// than decoding at full size and resizing; the transforms ask for the largest reduction that
// still leaves their crop at least as large as the output.
// Thread-safe: every call uses its own decompressor.
#ifndef DDPRUN_TRAINER_IMAGE_IMAGE_DECODER_H_
#define DDPRUN_TRAINER_IMAGE_IMAGE_DECODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainer/image/image_folder.h"

namespace ddprun::trainer {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3, row-major RGB
};

struct ImageSize {
  int width = 0;
  int height = 0;
};

// Width and height without decoding the pixels. kDataLoss when the header is unreadable.
absl::StatusOr<ImageSize> ReadImageSize(absl::string_view bytes, ImageFormat format);

// Decodes to RGB (grey and CMYK sources converted). `shrink` (1, 2, 4 or 8) divides both sides
// of a JPEG, rounding up; PNGs ignore it. kDataLoss for a corrupt or truncated file.
absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes, ImageFormat format, int shrink = 1);

// The whole file; kNotFound / kPermissionDenied / kDataLoss naming it.
absl::StatusOr<std::string> ReadFileBytes(const std::string& path);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IMAGE_IMAGE_DECODER_H_
