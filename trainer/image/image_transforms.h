// torchvision's ImageNet transforms on decoded RGB images, producing normalised CHW floats:
//   training:   RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) + RandomHorizontalFlip
//   validation: Resize(size * 256 / 224) + CenterCrop(size)
// then ToTensor + Normalize(ImageNet mean, std).
//
// Each transform first picks its crop in the source image's coordinates (from the header alone),
// so the decoder can shrink the JPEG in its IDCT when the crop is much larger than the output,
// then resamples the crop bilinearly (half-pixel centres, like PIL and antialias=False).
// Randomness comes from a generator seeded per sample (seed, epoch, sample index), so the
// result does not depend on which thread decodes it or on the world size.
#ifndef DDPRUN_TRAINER_IMAGE_IMAGE_TRANSFORMS_H_
#define DDPRUN_TRAINER_IMAGE_IMAGE_TRANSFORMS_H_

#include <cstdint>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "trainer/image/image_decoder.h"
#include "trainer/image/image_folder.h"

namespace ddprun::trainer {

inline constexpr float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

struct CropBox {
  double x = 0, y = 0, width = 0, height = 0;  // in source pixels
  bool flip = false;
};

// torchvision's RandomResizedCrop.get_params (10 tries, then the centre crop clamped to the
// ratio range) plus a fair coin for the flip.
CropBox RandomResizedCropBox(int width, int height, std::mt19937_64& rng, double min_scale = 0.08,
                             double max_scale = 1.0);
// Resize(resize) then CenterCrop(size), as one box in source pixels.
CropBox CenterCropBox(int width, int height, int resize, int size);

// The largest JPEG IDCT shrink (1, 2, 4, 8) that keeps `box` at least `size` pixels each way.
int ShrinkFor(const CropBox& box, int size);

// Resamples `box` of `img` (box in `img`'s own pixels) to size x size, flips, normalises and
// writes 3 * size * size floats (CHW) to `out`.
void ResampleNormalize(const RgbImage& img, const CropBox& box, int size, float* out);

// A generator for sample `index` of `epoch`: the same on every rank and thread.
std::mt19937_64 SampleRng(uint64_t seed, int64_t epoch, int64_t index);

struct TransformOptions {
  bool train = true;
  int size = 224;  // output side; validation resizes the short side to size * 256 / 224
};

// Reads nothing: decodes `bytes`, transforms, writes 3 * size * size floats to `out`.
// kDataLoss for a corrupt image.
absl::Status DecodeAndTransform(absl::string_view bytes, ImageFormat format,
                                const TransformOptions& options, std::mt19937_64& rng, float* out);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IMAGE_IMAGE_TRANSFORMS_H_
