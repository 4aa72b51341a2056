#include "trainer/io/idx_reader.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <string>

#include "absl/strings/str_cat.h"
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

// A gzip "bomb": `header` followed by `mib` MiB of zeros, as concatenated gzip members (which
// gzread reads as one stream), so a ~1 MB file inflates to ~1 GiB without compressing 1 GiB.
void WriteGzipBomb(const std::string& path, const std::string& header, int mib) {
  TempDir scratch;
  WriteGzip(scratch.File("h.gz"), header);
  WriteGzip(scratch.File("z.gz"), std::string(1 << 20, '\0'));
  const std::string zeros = ::ddprun::testing::ReadFile(scratch.File("z.gz"));
  std::string bomb = ::ddprun::testing::ReadFile(scratch.File("h.gz"));
  for (int i = 0; i < mib; ++i) bomb += zeros;
  WriteFile(path, bomb);
}

struct ChildRead {
  bool exited = false;  // false: the child crashed (e.g. out of memory)
  absl::StatusCode code = absl::StatusCode::kOk;
  long rss_growth_kb = 0;
  std::string message;
};

// ReadIdxFile(path) in a forked child, so that its peak memory is measured on its own.
ChildRead ReadIdxInChild(const std::string& path) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    struct rusage before {};
    getrusage(RUSAGE_SELF, &before);
    absl::StatusOr<IdxArray> a = ReadIdxFile(path);
    struct rusage after {};
    getrusage(RUSAGE_SELF, &after);
    const std::string out =
        absl::StrCat(static_cast<int>(a.status().code()), "\n", after.ru_maxrss - before.ru_maxrss,
                     "\n", a.status().message());
    const ssize_t n = write(fds[1], out.data(), out.size());
    _exit(n == static_cast<ssize_t>(out.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) got.append(buf, n);
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  ChildRead r;
  r.exited = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  const size_t a = got.find('\n');
  const size_t b = a == std::string::npos ? a : got.find('\n', a + 1);
  if (!r.exited || b == std::string::npos) return r;
  r.code = static_cast<absl::StatusCode>(std::stoi(got.substr(0, a)));
  r.rss_growth_kb = std::stol(got.substr(a + 1, b - a - 1));
  r.message = got.substr(b + 1);
  return r;
}

// Issue 28 #13: a 1 MB gzip bomb took 2.25 GB before being rejected for its trailing bytes.
TEST(IdxReaderTest, GzipBombStopsAtHeaderSize) {
  TempDir dir;
  const std::string path = dir.File("bomb-labels-idx1-ubyte.gz");
  WriteGzipBomb(path, Labels(16), 1024);
  ChildRead r = ReadIdxInChild(path);
  ASSERT_TRUE(r.exited) << "reading the bomb crashed the reader";
  EXPECT_EQ(r.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.message, HasSubstr(path));
  EXPECT_THAT(r.message, HasSubstr("trailing"));
  EXPECT_LT(r.rss_growth_kb, 64 * 1024) << "memory not bounded by the IDX header";
}

TEST(IdxReaderTest, AbsurdHeaderRefusedBeforeReadingData) {
  TempDir dir;
  const std::string path = dir.File("huge-images-idx3-ubyte.gz");
  // 65535^3 bytes (~256 TiB) promised; the data is a 1 GiB bomb.
  WriteGzipBomb(path, Be32(0x00000803) + Be32(65535) + Be32(65535) + Be32(65535), 1024);
  ChildRead r = ReadIdxInChild(path);
  ASSERT_TRUE(r.exited) << "reading the bomb crashed the reader";
  EXPECT_EQ(r.code, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.message, HasSubstr(path));
  EXPECT_THAT(r.message, HasSubstr("too large"));
  EXPECT_THAT(r.message, HasSubstr("281462092005375 bytes"));
  EXPECT_LT(r.rss_growth_kb, 64 * 1024) << "data read despite an absurd header";
}

TEST(IdxReaderTest, StreamedReadStillDetectsTruncation) {
  TempDir dir;
  const std::string body = Images(3, 28, 28);
  WriteGzip(dir.File("short.gz"), body.substr(0, body.size() - 5));
  absl::StatusOr<IdxArray> a = ReadIdxFile(dir.File("short.gz"));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr(dir.File("short.gz")));
  EXPECT_THAT(a.status().message(), HasSubstr("truncated"));
  WriteFile(dir.File("hdr"), Be32(0x00000803) + Be32(3));
  EXPECT_THAT(ReadIdxFile(dir.File("hdr")).status().message(), HasSubstr("truncated IDX header"));
  WriteFile(dir.File("magic"), std::string("\x00\x01\x08\x01", 4) + Be32(1) + "x");
  EXPECT_THAT(ReadIdxFile(dir.File("magic")).status().message(), HasSubstr("wrong magic"));
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
