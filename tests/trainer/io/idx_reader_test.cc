#include "trainer/io/idx_reader.h"

#include <zlib.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_env.h"
#include "trainer/io/mnist_data.h"

namespace ddprun::trainer {
namespace {

using ::ddprun::testing::TempDir;
using ::ddprun::testing::WriteFile;
using ::testing::HasSubstr;

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string Images(uint32_t n, uint32_t rows, uint32_t cols, int fill = 7) {
  return Be32(0x00000803) + Be32(n) + Be32(rows) + Be32(cols) +
         std::string(n * rows * cols, static_cast<char>(fill));
}

std::string Labels(uint32_t n, int label = 3) {
  return Be32(0x00000801) + Be32(n) + std::string(n, static_cast<char>(label));
}

void WriteGzip(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), data.size()), static_cast<int>(data.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

TEST(IdxReaderTest, ParsesImagesAndLabels) {
  absl::StatusOr<IdxArray> a = ParseIdx(Images(2, 3, 4), "x");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->dims, ::testing::ElementsAre(2, 3, 4));
  EXPECT_EQ(a->data.size(), 24u);
  absl::StatusOr<IdxArray> l = ParseIdx(Labels(5), "y");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->dims, ::testing::ElementsAre(5));
}

TEST(IdxReaderTest, WrongMagicNamesFile) {
  std::string bytes = Images(1, 2, 2);
  bytes[0] = 0x1f;
  absl::StatusOr<IdxArray> a = ParseIdx(bytes, "/d/train-images-idx3-ubyte");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("/d/train-images-idx3-ubyte"));
  EXPECT_THAT(a.status().message(), HasSubstr("wrong magic"));
}

TEST(IdxReaderTest, UnsupportedTypeRejected) {
  std::string bytes = Images(1, 2, 2);
  bytes[2] = 0x0D;  // float
  EXPECT_THAT(ParseIdx(bytes, "f").status().message(), HasSubstr("not supported"));
}

TEST(IdxReaderTest, TruncatedBodyAndHeader) {
  std::string bytes = Images(10, 28, 28);
  absl::StatusOr<IdxArray> a = ParseIdx(bytes.substr(0, bytes.size() - 1), "t");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(ParseIdx(bytes.substr(0, 9), "t").status().message(), HasSubstr("truncated"));
  EXPECT_THAT(ParseIdx(bytes.substr(0, 2), "t").status().message(), HasSubstr("not an IDX"));
}

TEST(IdxReaderTest, TrailingBytesRejected) {
  EXPECT_THAT(ParseIdx(Labels(3) + "x", "l").status().message(), HasSubstr("trailing"));
}

TEST(IdxReaderTest, ReadsGzippedAndPlainFiles) {
  TempDir dir;
  WriteFile(dir.File("plain"), Images(3, 28, 28));
  WriteGzip(dir.File("zipped.gz"), Images(3, 28, 28));
  absl::StatusOr<IdxArray> a = ReadIdxFile(dir.File("plain"));
  absl::StatusOr<IdxArray> b = ReadIdxFile(dir.File("zipped.gz"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->data, b->data);
  EXPECT_EQ(a->dims, b->dims);
}

TEST(IdxReaderTest, TruncatedGzipIsDataLoss) {
  TempDir dir;
  WriteGzip(dir.File("full.gz"), Images(50, 28, 28, 1) + std::string(100, 'q'));
  std::string z = ::ddprun::testing::ReadFile(dir.File("full.gz"));
  WriteFile(dir.File("cut.gz"), z.substr(0, z.size() / 2));
  absl::StatusOr<IdxArray> a = ReadIdxFile(dir.File("cut.gz"));
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr(dir.File("cut.gz")));
}

TEST(IdxReaderTest, MissingFileIsNotFound) {
  TempDir dir;
  absl::StatusOr<IdxArray> a = ReadIdxFile(dir.File("nope"));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(a.status().message(), HasSubstr(dir.File("nope")));
}

class MnistDataTest : public ::testing::Test {
 protected:
  void WriteSet(const std::string& where, uint32_t train, uint32_t train_labels, uint32_t test) {
    WriteFile(where + "/train-images-idx3-ubyte", Images(train, 28, 28));
    WriteGzip(where + "/train-labels-idx1-ubyte.gz", Labels(train_labels));
    WriteFile(where + "/t10k-images-idx3-ubyte", Images(test, 28, 28));
    WriteFile(where + "/t10k-labels-idx1-ubyte", Labels(test));
  }
  TempDir dir_;
};

TEST_F(MnistDataTest, LoadsStandardNamesMixedGzip) {
  WriteSet(dir_.path(), 20, 20, 5);
  absl::StatusOr<MnistData> d = LoadMnist(dir_.path());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.count, 20);
  EXPECT_EQ(d->test.count, 5);
  EXPECT_EQ(d->train.labels[0], 3);
}

TEST_F(MnistDataTest, FindsTorchvisionLayout) {
  const std::string raw = dir_.File("FashionMNIST/raw");
  ASSERT_EQ(system(("mkdir -p " + raw).c_str()), 0);
  WriteSet(raw, 4, 4, 2);
  absl::StatusOr<MnistData> d = LoadMnist(dir_.path());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.count, 4);
}

TEST_F(MnistDataTest, CountMismatchNamesBothFiles) {
  WriteSet(dir_.path(), 20, 19, 5);
  absl::StatusOr<MnistData> d = LoadMnist(dir_.path());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("19 labels"));
  EXPECT_THAT(d.status().message(), HasSubstr("train-images-idx3-ubyte has 20 images"));
}

TEST_F(MnistDataTest, MissingFileNamed) {
  WriteSet(dir_.path(), 4, 4, 2);
  ASSERT_EQ(unlink(dir_.File("t10k-labels-idx1-ubyte").c_str()), 0);
  absl::StatusOr<MnistData> d = LoadMnist(dir_.path());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr("t10k-labels-idx1-ubyte"));
}

TEST_F(MnistDataTest, LabelOutOfRange) {
  WriteSet(dir_.path(), 4, 4, 2);
  WriteFile(dir_.File("t10k-labels-idx1-ubyte"), Labels(2, 11));
  EXPECT_THAT(LoadMnist(dir_.path()).status().message(), HasSubstr("label 11"));
}

TEST(MnistRealDataTest, DebianFashionMnistLoads) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (access(dir.c_str(), R_OK) != 0) GTEST_SKIP() << dir << " not installed";
  absl::StatusOr<MnistData> d = LoadMnist(dir);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->train.count, 60000);
  EXPECT_EQ(d->test.count, 10000);
  EXPECT_EQ(d->train.rows, 28);
}

}  // namespace
}  // namespace ddprun::trainer
