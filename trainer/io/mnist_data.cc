#include "trainer/io/mnist_data.h"

#include <sys/stat.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer/io/idx_reader.h"

namespace ddprun::trainer {
namespace {

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::StatusOr<std::string> FindIdxFile(const std::string& dir, const std::string& base) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat(dir, ": data directory does not exist"));
  }
  for (const char* sub : {"", "/raw", "/FashionMNIST/raw", "/MNIST/raw"}) {
    for (const char* ext : {"", ".gz"}) {
      std::string path = absl::StrCat(dir, sub, "/", base, ext);
      if (IsRegularFile(path)) return path;
    }
  }
  return absl::NotFoundError(absl::StrCat(dir, "/", base, ": missing (looked for ", base,
                                          "[.gz] in ", dir,
                                          ", raw/, FashionMNIST/raw/, MNIST/raw/)"));
}

absl::StatusOr<MnistSplit> LoadMnistSplit(const std::string& images_path,
                                          const std::string& labels_path) {
  DDPRUN_ASSIGN_OR_RETURN(IdxArray images, ReadIdxFile(images_path));
  DDPRUN_ASSIGN_OR_RETURN(IdxArray labels, ReadIdxFile(labels_path));
  if (images.dims.size() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(images_path,
                                                   ": expected 3 dimensions (N, rows, "
                                                   "cols), found ",
                                                   images.dims.size()));
  }
  if (labels.dims.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_path, ": expected 1 dimension (N), found ", labels.dims.size()));
  }
  if (images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(labels_path, ": ", labels.dims[0],
                                                   " labels but ", images_path, " has ",
                                                   images.dims[0], " images"));
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kMnistClasses) {
      return absl::InvalidArgumentError(absl::StrCat(labels_path, ": label ", int{labels.data[i]},
                                                     " at index ", i, " is not in [0, 10)"));
    }
  }
  MnistSplit split;
  split.count = images.dims[0];
  split.rows = images.dims[1];
  split.cols = images.dims[2];
  split.images = std::move(images.data);
  split.labels = std::move(labels.data);
  return split;
}

absl::StatusOr<MnistData> LoadMnist(const std::string& dir) {
  MnistData data;
  DDPRUN_ASSIGN_OR_RETURN(std::string train_images, FindIdxFile(dir, "train-images-idx3-ubyte"));
  DDPRUN_ASSIGN_OR_RETURN(std::string train_labels, FindIdxFile(dir, "train-labels-idx1-ubyte"));
  DDPRUN_ASSIGN_OR_RETURN(std::string test_images, FindIdxFile(dir, "t10k-images-idx3-ubyte"));
  DDPRUN_ASSIGN_OR_RETURN(std::string test_labels, FindIdxFile(dir, "t10k-labels-idx1-ubyte"));
  DDPRUN_ASSIGN_OR_RETURN(data.train, LoadMnistSplit(train_images, train_labels));
  DDPRUN_ASSIGN_OR_RETURN(data.test, LoadMnistSplit(test_images, test_labels));
  if (data.train.rows != data.test.rows || data.train.cols != data.test.cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        test_images, ": image size ", data.test.rows, "x", data.test.cols, " differs from ",
        train_images, " (", data.train.rows, "x", data.train.cols, ")"));
  }
  return data;
}

void TruncateSplit(MnistSplit& split, int64_t n) {
  if (n <= 0 || n >= split.count) return;
  split.count = n;
  split.images.resize(n * split.rows * split.cols);
  split.labels.resize(n);
}

}  // namespace ddprun::trainer
