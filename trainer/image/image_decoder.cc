#include "trainer/image/image_decoder.h"

#include <png.h>
#include <turbojpeg.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ddprun::trainer {
namespace {

struct TjDeleter {
  void operator()(void* h) const { tjDestroy(h); }
};
using TjHandle = std::unique_ptr<void, TjDeleter>;

absl::Status JpegError(void* handle, const char* what) {
  return absl::DataLossError(absl::StrCat("corrupt JPEG (", what, "): ", tjGetErrorStr2(handle)));
}

absl::StatusOr<RgbImage> DecodeJpeg(absl::string_view bytes, int shrink) {
  TjHandle tj(tjInitDecompress());
  if (tj == nullptr) return absl::InternalError("tjInitDecompress failed");
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.get(), data, bytes.size(), &width, &height, &subsamp, &colorspace) !=
      0) {
    return JpegError(tj.get(), "header");
  }
  RgbImage img;
  img.width = TJSCALED(width, (tjscalingfactor{1, shrink}));
  img.height = TJSCALED(height, (tjscalingfactor{1, shrink}));
  // TurboJPEG cannot convert CMYK to RGB itself (a few ImageNet files are CMYK).
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int channels = cmyk ? 4 : 3;
  std::vector<uint8_t> out(static_cast<size_t>(img.width) * img.height * channels);
  if (tjDecompress2(tj.get(), data, bytes.size(), out.data(), img.width, 0, img.height,
                    cmyk ? TJPF_CMYK : TJPF_RGB, 0) != 0) {
    // A warning (e.g. extraneous bytes after the image) still yields a complete image, as PIL
    // accepts it; a fatal error or a truncated file (half the picture grey) does not.
    if (tjGetErrorCode(tj.get()) != TJERR_WARNING) return JpegError(tj.get(), "data");
    if (std::strstr(tjGetErrorStr2(tj.get()), "Premature end") != nullptr) {
      return JpegError(tj.get(), "truncated");
    }
  }
  if (cmyk) {
    // Adobe CMYK JPEGs are stored inverted; RGB = (inverted C,M,Y) * K / 255.
    img.pixels.resize(static_cast<size_t>(img.width) * img.height * 3);
    for (size_t i = 0, n = static_cast<size_t>(img.width) * img.height; i < n; ++i) {
      const int k = out[4 * i + 3];
      for (int c = 0; c < 3; ++c) img.pixels[3 * i + c] = out[4 * i + c] * k / 255;
    }
  } else {
    img.pixels = std::move(out);
  }
  return img;
}

absl::StatusOr<RgbImage> DecodePng(absl::string_view bytes) {
  // libpng's simplified API does the conversions (palette, grey, 16-bit, alpha composited on
  // black, which PIL's convert('RGB') drops the same way) and reports errors without longjmp.
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    const std::string msg = image.message;
    png_image_free(&image);
    return absl::DataLossError(absl::StrCat("corrupt PNG: ", msg));
  }
  image.format = PNG_FORMAT_RGB;
  RgbImage img;
  img.width = static_cast<int>(image.width);
  img.height = static_cast<int>(image.height);
  img.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, img.pixels.data(), 0, nullptr)) {
    const std::string msg = image.message;
    png_image_free(&image);
    return absl::DataLossError(absl::StrCat("corrupt PNG: ", msg));
  }
  return img;
}

}  // namespace

absl::StatusOr<ImageSize> ReadImageSize(absl::string_view bytes, ImageFormat format) {
  if (format == ImageFormat::kJpeg) {
    TjHandle tj(tjInitDecompress());
    if (tj == nullptr) return absl::InternalError("tjInitDecompress failed");
    int w = 0, h = 0, subsamp = 0, colorspace = 0;
    if (tjDecompressHeader3(tj.get(), reinterpret_cast<const unsigned char*>(bytes.data()),
                            bytes.size(), &w, &h, &subsamp, &colorspace) != 0) {
      return JpegError(tj.get(), "header");
    }
    return ImageSize{w, h};
  }
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    const std::string msg = image.message;
    png_image_free(&image);
    return absl::DataLossError(absl::StrCat("corrupt PNG: ", msg));
  }
  ImageSize size{static_cast<int>(image.width), static_cast<int>(image.height)};
  png_image_free(&image);
  return size;
}

absl::StatusOr<RgbImage> DecodeImage(absl::string_view bytes, ImageFormat format, int shrink) {
  if (shrink != 1 && shrink != 2 && shrink != 4 && shrink != 8) {
    return absl::InvalidArgumentError(absl::StrCat("JPEG shrink ", shrink, " not in {1,2,4,8}"));
  }
  if (format == ImageFormat::kJpeg) return DecodeJpeg(bytes, shrink);
  return DecodePng(bytes);
}

absl::StatusOr<std::string> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const std::string msg = absl::StrCat(path, ": ", std::strerror(errno));
    if (errno == EACCES) return absl::PermissionDeniedError(msg);
    return absl::NotFoundError(msg);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return std::move(ss).str();
}

}  // namespace ddprun::trainer
