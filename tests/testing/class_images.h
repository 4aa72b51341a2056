// Small synthetic ImageFolder images for the imagenet trainer's tests: a JPEG whose colour
// says its class (channel `cls` bright), with per-image noise from `seed`. Callers link
// libjpeg-turbo (the trainer's image library does).
#ifndef DDPRUN_TESTS_TESTING_CLASS_IMAGES_H_
#define DDPRUN_TESTS_TESTING_CLASS_IMAGES_H_

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::testing {

// A 40x36 JPEG of class `cls` (0, 1 or 2).
inline std::string MakeClassJpeg(int cls, int seed) {
  const int w = 40, h = 36;
  std::vector<uint8_t> rgb(w * h * 3);
  uint32_t x = 2654435761u * (seed + 1);
  for (size_t i = 0; i < rgb.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    rgb[i] = static_cast<uint8_t>((i % 3 == static_cast<size_t>(cls) ? 200 : 40) + (x >> 28));
  }
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_420, 85, 0), 0);
  std::string out(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_TESTING_CLASS_IMAGES_H_
