// The four MNIST-format files of a data directory, found by their standard names, loaded and
// cross-checked (image/label counts agree, labels in range).
#ifndef DDPRUN_TRAINER_IO_MNIST_DATA_H_
#define DDPRUN_TRAINER_IO_MNIST_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddprun::trainer {

struct MnistSplit {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> images;  // count * rows * cols
  std::vector<uint8_t> labels;  // count, each < kMnistClasses
};

struct MnistData {
  MnistSplit train;
  MnistSplit test;
};

inline constexpr int kMnistClasses = 10;

// Path of `base` (e.g. "train-images-idx3-ubyte") under `dir`: tries `base` and `base.gz` in
// dir, dir/raw, dir/FashionMNIST/raw and dir/MNIST/raw (torchvision's layout). kNotFound names
// the file and the directory.
absl::StatusOr<std::string> FindIdxFile(const std::string& dir, const std::string& base);

// Loads one split from explicit paths.
absl::StatusOr<MnistSplit> LoadMnistSplit(const std::string& images_path,
                                          const std::string& labels_path);

// Loads train-{images-idx3,labels-idx1}-ubyte and t10k-{...} from `dir`.
absl::StatusOr<MnistData> LoadMnist(const std::string& dir);

// Keeps the first `n` samples (n <= 0 or n >= count: unchanged).
void TruncateSplit(MnistSplit& split, int64_t n);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IO_MNIST_DATA_H_
