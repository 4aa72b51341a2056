#include "trainer/image/image_transforms.h"

#include <algorithm>
#include <cmath>

#include "common/status_macros.h"

namespace ddprun::trainer {

CropBox RandomResizedCropBox(int width, int height, std::mt19937_64& rng, double min_scale,
                             double max_scale) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  CropBox box;
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * (min_scale + (max_scale - min_scale) * uniform(rng));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * uniform(rng));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      box.y = std::uniform_int_distribution<int>(0, height - h)(rng);
      box.x = std::uniform_int_distribution<int>(0, width - w)(rng);
      box.width = w;
      box.height = h;
      found = true;
    }
  }
  if (!found) {
    // torchvision's fallback: the whole image, cut to the nearest allowed aspect ratio.
    const double ratio = static_cast<double>(width) / height;
    int w = width, h = height;
    if (ratio < 3.0 / 4.0) {
      h = static_cast<int>(std::lround(w / (3.0 / 4.0)));
    } else if (ratio > 4.0 / 3.0) {
      w = static_cast<int>(std::lround(h * (4.0 / 3.0)));
    }
    box = {static_cast<double>((width - w) / 2), static_cast<double>((height - h) / 2),
           static_cast<double>(w), static_cast<double>(h)};
  }
  box.flip = uniform(rng) < 0.5;
  return box;
}

CropBox CenterCropBox(int width, int height, int resize, int size) {
  // Resize: the short side becomes `resize` (the long side truncated, as torchvision does).
  const double scale = static_cast<double>(resize) / std::min(width, height);
  const int rw =
      width <= height ? resize : static_cast<int>(resize * static_cast<double>(width) / height);
  const int rh =
      height <= width ? resize : static_cast<int>(resize * static_cast<double>(height) / width);
  // CenterCrop: offsets rounded like torchvision's int(round((h - size) / 2)).
  const double top = std::round((rh - size) / 2.0), left = std::round((rw - size) / 2.0);
  return {left / scale, top / scale, size / scale, size / scale, false};
}

int ShrinkFor(const CropBox& box, int size) {
  int shrink = 1;
  while (shrink < 8 && box.width / (shrink * 2) >= size && box.height / (shrink * 2) >= size) {
    shrink *= 2;
  }
  return shrink;
}

void ResampleNormalize(const RgbImage& img, const CropBox& box, int size, float* out) {
  const double sx = box.width / size, sy = box.height / size;
  const size_t plane = static_cast<size_t>(size) * size;
  // Column taps once per image: they are the same for every row.
  std::vector<int> x0(size), x1(size);
  std::vector<float> fx(size);
  for (int ox = 0; ox < size; ++ox) {
    const int col = box.flip ? size - 1 - ox : ox;
    double x = box.x + (col + 0.5) * sx - 0.5;
    x = std::clamp(x, 0.0, img.width - 1.0);
    x0[ox] = static_cast<int>(x);
    x1[ox] = std::min(x0[ox] + 1, img.width - 1);
    fx[ox] = static_cast<float>(x - x0[ox]);
  }
  float scale[3], bias[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * kImageNetStd[c]);
    bias[c] = -kImageNetMean[c] / kImageNetStd[c];
  }
  for (int oy = 0; oy < size; ++oy) {
    double y = std::clamp(box.y + (oy + 0.5) * sy - 0.5, 0.0, img.height - 1.0);
    const int y0 = static_cast<int>(y);
    const int y1 = std::min(y0 + 1, img.height - 1);
    const float fy = static_cast<float>(y - y0);
    const uint8_t* r0 = img.pixels.data() + static_cast<size_t>(y0) * img.width * 3;
    const uint8_t* r1 = img.pixels.data() + static_cast<size_t>(y1) * img.width * 3;
    for (int ox = 0; ox < size; ++ox) {
      const int a = x0[ox] * 3, b = x1[ox] * 3;
      const float wx = fx[ox];
      for (int c = 0; c < 3; ++c) {
        const float top = r0[a + c] + (r0[b + c] - r0[a + c]) * wx;
        const float bot = r1[a + c] + (r1[b + c] - r1[a + c]) * wx;
        const float v = top + (bot - top) * fy;
        out[c * plane + static_cast<size_t>(oy) * size + ox] = v * scale[c] + bias[c];
      }
    }
  }
}

std::mt19937_64 SampleRng(uint64_t seed, int64_t epoch, int64_t index) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch), static_cast<uint32_t>(index),
                    static_cast<uint32_t>(static_cast<uint64_t>(index) >> 32)};
  return std::mt19937_64(seq);
}

absl::Status DecodeAndTransform(absl::string_view bytes, ImageFormat format,
                                const TransformOptions& options, std::mt19937_64& rng, float* out) {
  DDPRUN_ASSIGN_OR_RETURN(ImageSize full, ReadImageSize(bytes, format));
  if (full.width <= 0 || full.height <= 0) return absl::DataLossError("image of size 0");
  const CropBox box = options.train ? RandomResizedCropBox(full.width, full.height, rng)
                                    : CenterCropBox(full.width, full.height,
                                                    options.size * 256 / 224, options.size);
  const int shrink = format == ImageFormat::kJpeg ? ShrinkFor(box, options.size) : 1;
  DDPRUN_ASSIGN_OR_RETURN(RgbImage img, DecodeImage(bytes, format, shrink));
  // The decoded size is the full size divided by `shrink`, rounded up: scale the box exactly.
  const double kx = static_cast<double>(img.width) / full.width;
  const double ky = static_cast<double>(img.height) / full.height;
  const CropBox scaled{box.x * kx, box.y * ky, box.width * kx, box.height * ky, box.flip};
  ResampleNormalize(img, scaled, options.size, out);
  return absl::OkStatus();
}

}  // namespace ddprun::trainer
