// ImageFolder scanning, JPEG/PNG decoding, the ImageNet transforms and the decode pool, on small
// images written in the test with libjpeg-turbo's compressor and libpng.
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"
#include "trainer/image/image_decoder.h"
#include "trainer/image/image_folder.h"
#include "trainer/image/image_transforms.h"
#include "trainer/image/input_pipeline.h"

namespace ddprun::trainer {
namespace {

using ::ddprun::testing::TempDir;
using ::ddprun::testing::WriteFile;
using ::testing::HasSubstr;

// A w x h JPEG whose left half is red and right half blue (so crops and flips are visible).
std::string MakeJpeg(int w, int h, int quality = 90) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = x < w / 2 ? 230 : 20;
      p[1] = static_cast<uint8_t>(y * 255 / std::max(1, h - 1));
      p[2] = x < w / 2 ? 20 : 230;
    }
  }
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_420, quality, 0), 0);
  std::string out(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

std::string MakePng(int w, int h) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = w;
  image.height = h;
  image.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3, 128);
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, rgb.data(), 0, nullptr));
  std::string out(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, rgb.data(), 0, nullptr));
  out.resize(size);
  return out;
}

void Mkdir(const std::string& p) { std::filesystem::create_directories(p); }

TEST(ImageDecoderTest, DecodesJpegAtFullAndReducedSize) {
  const std::string jpeg = MakeJpeg(64, 48);
  absl::StatusOr<RgbImage> full = DecodeImage(jpeg, ImageFormat::kJpeg);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->width, 64);
  EXPECT_EQ(full->height, 48);
  ASSERT_EQ(full->pixels.size(), 64u * 48 * 3);
  EXPECT_GT(full->pixels[0], 200);  // red on the left
  EXPECT_LT(full->pixels[2], 60);
  absl::StatusOr<RgbImage> quarter = DecodeImage(jpeg, ImageFormat::kJpeg, 4);
  ASSERT_TRUE(quarter.ok()) << quarter.status();
  EXPECT_EQ(quarter->width, 16);
  EXPECT_EQ(quarter->height, 12);
  absl::StatusOr<ImageSize> size = ReadImageSize(jpeg, ImageFormat::kJpeg);
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size->width, 64);
}

TEST(ImageDecoderTest, DecodesCmykJpegToRgb) {
  // A few ImageNet files are CMYK; TurboJPEG cannot convert those to RGB itself. Pure red is
  // C=0 M=255 Y=255 K=0, stored inverted (Adobe) as 255, 0, 0, 255.
  std::vector<uint8_t> cmyk(16 * 16 * 4);
  for (size_t i = 0; i < cmyk.size(); i += 4) {
    cmyk[i] = 255;
    cmyk[i + 1] = 0;
    cmyk[i + 2] = 0;
    cmyk[i + 3] = 255;
  }
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(tj, cmyk.data(), 16, 0, 16, TJPF_CMYK, &buf, &size, TJSAMP_444, 95, 0), 0);
  const std::string jpeg(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  absl::StatusOr<RgbImage> img = DecodeImage(jpeg, ImageFormat::kJpeg);
  ASSERT_TRUE(img.ok()) << img.status();
  ASSERT_EQ(img->pixels.size(), 16u * 16 * 3);
  EXPECT_GT(img->pixels[0], 240);
  EXPECT_LT(img->pixels[1], 15);
  EXPECT_LT(img->pixels[2], 15);
}

TEST(ImageDecoderTest, DecodesPng) {
  absl::StatusOr<RgbImage> img = DecodeImage(MakePng(10, 7), ImageFormat::kPng);
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->width, 10);
  EXPECT_EQ(img->height, 7);
  EXPECT_EQ(img->pixels[5], 128);
}

TEST(ImageDecoderTest, CorruptAndTruncatedJpegAreErrorsNotCrashes) {
  const std::string jpeg = MakeJpeg(64, 64);
  absl::StatusOr<RgbImage> garbage = DecodeImage("\xFF\xD8\xFFgarbage bytes", ImageFormat::kJpeg);
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(garbage.status().message()), HasSubstr("corrupt JPEG"));
  absl::StatusOr<RgbImage> truncated =
      DecodeImage(jpeg.substr(0, jpeg.size() / 2), ImageFormat::kJpeg);
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss) << truncated.status();
  std::string flipped = jpeg;
  for (size_t i = flipped.size() / 3; i < flipped.size() - 2; i += 7) flipped[i] ^= 0x5A;
  absl::StatusOr<RgbImage> noisy = DecodeImage(flipped, ImageFormat::kJpeg);  // may decode
  SUCCEED() << noisy.status();
  EXPECT_EQ(DecodeImage("\x89PNG\r\n\x1a\nxx", ImageFormat::kPng).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ImageTransformsTest, TrainOutputShapeRangeAndDeterminism) {
  const std::string jpeg = MakeJpeg(80, 60);
  TransformOptions opt{/*train=*/true, /*size=*/32};
  std::vector<float> a(3 * 32 * 32, NAN), b(3 * 32 * 32, NAN), c(3 * 32 * 32, NAN);
  std::mt19937_64 r1 = SampleRng(7, 1, 3), r2 = SampleRng(7, 1, 3), r3 = SampleRng(7, 2, 3);
  ASSERT_TRUE(DecodeAndTransform(jpeg, ImageFormat::kJpeg, opt, r1, a.data()).ok());
  ASSERT_TRUE(DecodeAndTransform(jpeg, ImageFormat::kJpeg, opt, r2, b.data()).ok());
  ASSERT_TRUE(DecodeAndTransform(jpeg, ImageFormat::kJpeg, opt, r3, c.data()).ok());
  EXPECT_EQ(a, b);  // same seed, epoch, index: same crop
  EXPECT_NE(a, c);  // another epoch: another crop
  // Normalised [0, 255]: (0 - mean) / std .. (1 - mean) / std.
  for (int ch = 0; ch < 3; ++ch) {
    for (int i = 0; i < 32 * 32; ++i) {
      const float v = a[ch * 32 * 32 + i];
      ASSERT_FALSE(std::isnan(v));
      EXPECT_GE(v, -kImageNetMean[ch] / kImageNetStd[ch] - 1e-4);
      EXPECT_LE(v, (1 - kImageNetMean[ch]) / kImageNetStd[ch] + 1e-4);
    }
  }
}

TEST(ImageTransformsTest, RandomResizedCropFollowsTorchvisionBounds) {
  std::mt19937_64 rng(1);
  int flips = 0;
  for (int i = 0; i < 2000; ++i) {
    CropBox box = RandomResizedCropBox(500, 375, rng);
    ASSERT_GE(box.x, 0);
    ASSERT_GE(box.y, 0);
    ASSERT_LE(box.x + box.width, 500);
    ASSERT_LE(box.y + box.height, 375);
    const double area = box.width * box.height / (500.0 * 375);
    ASSERT_GE(area, 0.08 - 0.01);
    const double ratio = box.width / box.height;
    ASSERT_GE(ratio, 3.0 / 4 - 0.05);
    ASSERT_LE(ratio, 4.0 / 3 + 0.05);
    flips += box.flip;
  }
  EXPECT_GT(flips, 850);
  EXPECT_LT(flips, 1150);
  // A 1000x10 strip cannot hold any candidate: the fallback is the centre crop at ratio 4/3.
  CropBox strip = RandomResizedCropBox(1000, 10, rng);
  EXPECT_DOUBLE_EQ(strip.height, 10);
  EXPECT_DOUBLE_EQ(strip.width, 13);
  EXPECT_DOUBLE_EQ(strip.x, (1000 - 13) / 2);
}

TEST(ImageTransformsTest, ValidationIsResizeThenCenterCropAndFlipShows) {
  // 512x256 source, Resize(256): 512x256 -> scale 1; CenterCrop(224): x 144, y 16.
  CropBox box = CenterCropBox(512, 256, 256, 224);
  EXPECT_DOUBLE_EQ(box.x, 144);
  EXPECT_DOUBLE_EQ(box.y, 16);
  EXPECT_DOUBLE_EQ(box.width, 224);
  EXPECT_EQ(ShrinkFor(CenterCropBox(2048, 2048, 256, 224), 224), 8);
  EXPECT_EQ(ShrinkFor(box, 224), 1);

  const std::string jpeg = MakeJpeg(64, 64);
  absl::StatusOr<RgbImage> img = DecodeImage(jpeg, ImageFormat::kJpeg);
  ASSERT_TRUE(img.ok());
  std::vector<float> plain(3 * 16 * 16), flipped(3 * 16 * 16);
  ResampleNormalize(*img, {0, 0, 64, 64, false}, 16, plain.data());
  ResampleNormalize(*img, {0, 0, 64, 64, true}, 16, flipped.data());
  EXPECT_GT(plain[0], 1.0f);     // red channel, left column: red
  EXPECT_LT(flipped[0], -1.0f);  // flipped: the blue half is on the left
  EXPECT_NEAR(plain[15], flipped[0], 1e-5);
}

// Resize(256) + CenterCrop(224) + Normalize against torchvision 0.14 (Debian's, tensor path:
// libjpeg decode, bilinear without antialias) on a real photo. Not bit-equal: this decoder
// shrinks 2x in the IDCT where torchvision interpolates, and rounds differently.
TEST(ImageTransformsTest, ValidationMatchesTorchvision) {
  const std::string photo = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg";
  const std::string python = ::ddprun::testing::SystemPython();
  if (access(photo.c_str(), R_OK) != 0 || access(python.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "needs " << photo << " and " << python;
  }
  TempDir dir;
  const std::string script = absl::StrCat(
      "import sys\n"
      "try:\n"
      "  import torchvision.transforms as T\n"
      "  from torchvision.io import read_file, decode_jpeg\n"
      "except ImportError:\n"
      "  sys.exit(77)\n"
      "img = decode_jpeg(read_file('",
      photo, "'))\n",
      "t = T.Compose([T.Resize(256), T.CenterCrop(224)])(img).float().div(255)\n"
      "t = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])(t)\n"
      "t.numpy().astype('float32').tofile('",
      dir.File("tv.f32"), "')\n");
  WriteFile(dir.File("tv.py"), script);
  const int rc = std::system(absl::StrCat(python, " ", dir.File("tv.py")).c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "no torchvision for " << python;
  ASSERT_EQ(rc, 0);
  const std::string tv = ::ddprun::testing::ReadFile(dir.File("tv.f32"));
  ASSERT_EQ(tv.size(), 3u * 224 * 224 * sizeof(float));
  const float* ref = reinterpret_cast<const float*>(tv.data());
  const std::string jpeg = ::ddprun::testing::ReadFile(photo);
  std::vector<float> ours(3 * 224 * 224);
  std::mt19937_64 rng(0);
  ASSERT_TRUE(DecodeAndTransform(jpeg, ImageFormat::kJpeg, {false, 224}, rng, ours.data()).ok());
  double sum = 0;
  for (size_t i = 0; i < ours.size(); ++i) sum += std::abs(ours[i] - ref[i]);
  const double mean_abs = sum / ours.size();
  std::cout << "mean |ours - torchvision| = " << mean_abs << " (normalised units)\n";
  EXPECT_LT(mean_abs, 0.05);  // about 3 of 255 grey levels; a random crop instead gives 1.4
}

TEST(ImageFolderTest, ClassesSortedSamplesLabelledCorruptSkipped) {
  TempDir dir;
  for (const char* c : {"zebra", "ant", "Bee"}) Mkdir(dir.File(c));
  WriteFile(dir.File("zebra/1.jpg"), MakeJpeg(8, 8));
  WriteFile(dir.File("zebra/2.JPEG"), MakeJpeg(8, 8));
  WriteFile(dir.File("ant/a.png"), MakePng(4, 4));
  WriteFile(dir.File("ant/broken.jpg"), "this is not a jpeg");
  WriteFile(dir.File("ant/notes.txt"), "hello");
  WriteFile(dir.File("Bee/b.jpeg"), MakeJpeg(8, 8));
  absl::StatusOr<ImageFolder> f = ScanImageFolder(dir.path());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->classes, (std::vector<std::string>{"Bee", "ant", "zebra"}));  // byte order
  ASSERT_EQ(f->samples.size(), 4u);
  EXPECT_EQ(f->samples[0].label, 0);
  EXPECT_EQ(f->samples[1].label, 1);
  EXPECT_EQ(f->samples[1].format, ImageFormat::kPng);
  EXPECT_EQ(f->samples[3].label, 2);
  EXPECT_EQ(f->skipped, 2);
  ASSERT_FALSE(f->warnings.empty());
  EXPECT_THAT(f->warnings.back(), HasSubstr("skipped 2"));
  EXPECT_THAT(f->warnings[0], HasSubstr("broken.jpg"));
}

TEST(ImageFolderTest, EmptyClassFoldersAreNamed) {
  TempDir dir;
  for (const char* c : {"a", "b", "c"}) Mkdir(dir.File(c));
  WriteFile(dir.File("a/1.jpg"), MakeJpeg(8, 8));
  WriteFile(dir.File("c/bad.jpg"), "garbage");  // only a corrupt file: empty too
  absl::StatusOr<ImageFolder> f = ScanImageFolder(dir.path());
  ASSERT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("2 class folder(s)"));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("b, c"));
}

TEST(ImageFolderTest, MissingUnreadableAndClasslessDirectories) {
  TempDir dir;
  EXPECT_EQ(ScanImageFolder(dir.File("nope")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ScanImageFolder(dir.path()).status().code(), absl::StatusCode::kInvalidArgument);
  Mkdir(dir.File("locked/a"));
  chmod(dir.File("locked").c_str(), 0);
  if (geteuid() != 0) {  // root reads anything
    absl::StatusOr<ImageFolder> f = ScanImageFolder(dir.File("locked"));
    EXPECT_EQ(f.status().code(), absl::StatusCode::kPermissionDenied) << f.status();
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("locked"));
  }
  chmod(dir.File("locked").c_str(), 0755);
}

TEST(ImageFolderTest, ValidationClassesMustExistInTraining) {
  TempDir dir;
  for (const char* c : {"b", "x", "y"}) Mkdir(dir.File(c));
  for (const char* c : {"b", "x", "y"})
    WriteFile(dir.File(absl::StrCat(c, "/1.jpg")), MakeJpeg(8, 8));
  absl::StatusOr<ImageFolder> bad = ScanValidationFolder(dir.path(), {"a", "b"});
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("lacks: x, y"));
  absl::StatusOr<ImageFolder> ok = ScanValidationFolder(dir.path(), {"a", "b", "x", "y"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->samples[0].label, 1);  // "b" is class 1 of the training set
  EXPECT_EQ(ok->classes.size(), 4u);
}

TEST(InputPipelineTest, BatchesInOrderDecodeFailuresDroppedAndCounted) {
  TempDir dir;
  Mkdir(dir.File("a"));
  Mkdir(dir.File("b"));
  for (int i = 0; i < 10; ++i) {
    WriteFile(dir.File(absl::StrCat(i % 2 ? "a" : "b", "/", i, ".jpg")), MakeJpeg(40 + i, 30));
  }
  const std::string good = MakeJpeg(40, 40);
  WriteFile(dir.File("a/truncated.jpg"), good.substr(0, good.size() / 2));  // valid signature
  absl::StatusOr<ImageFolder> f = ScanImageFolder(dir.path());
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->samples.size(), 11u);
  std::vector<int64_t> indices(11);
  for (int i = 0; i < 11; ++i) indices[i] = 10 - i;
  PipelineOptions opt;
  opt.workers = 3;
  opt.prefetch = 1;
  opt.batch_size = 4;
  opt.transform = {true, 16};
  auto run = [&] {
    InputPipeline p(&*f, indices, opt);
    EXPECT_EQ(p.num_batches(), 3);
    std::vector<ImageBatch> out;
    while (std::optional<ImageBatch> b = p.Next()) out.push_back(std::move(*b));
    return out;
  };
  std::vector<ImageBatch> first = run(), second = run();
  opt.workers = 1;
  opt.prefetch = 3;
  std::vector<ImageBatch> single = run();
  ASSERT_EQ(first.size(), 3u);
  int64_t total = 0, errors = 0;
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].index, static_cast<int64_t>(i));
    EXPECT_EQ(first[i].images.size(), static_cast<size_t>(first[i].size) * 3 * 16 * 16);
    EXPECT_EQ(first[i].labels.size(), static_cast<size_t>(first[i].size));
    EXPECT_EQ(first[i].images, second[i].images);  // deterministic whatever thread decoded it
    EXPECT_EQ(first[i].images, single[i].images);
    EXPECT_EQ(first[i].labels, single[i].labels);
    EXPECT_EQ(first[i].errors, single[i].errors);
    total += first[i].size;
    errors += first[i].errors.size();
    for (const std::string& e : first[i].errors) EXPECT_THAT(e, HasSubstr("truncated.jpg"));
  }
  EXPECT_EQ(total, 10);
  EXPECT_EQ(errors, 1);
  // Destroying a pipeline that was never drained stops its workers.
  InputPipeline abandoned(&*f, indices, opt);
}

}  // namespace
}  // namespace ddprun::trainer
