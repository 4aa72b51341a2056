// `ddp-train imagenet` as real processes on a small ImageFolder generated here (three classes of
// 40x36 JPEGs written with libjpeg-turbo, one corrupt file): bad input exits 2 naming the
// problem; two ranks under ddprun train resnet18 on 32x32 crops, write a checkpoint and the
// best model, and a second run resumes from it.
#include <signal.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/class_images.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace ddprun::trainer {
namespace {

using ::ddprun::testing::BinPath;
using ::ddprun::testing::ExitStatus;
using ::ddprun::testing::ReadFile;
using ::ddprun::testing::Subprocess;
using ::ddprun::testing::TempDir;
using ::ddprun::testing::WriteFile;
using std::chrono::seconds;
using ::testing::HasSubstr;

class ImageNetTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(BinPath("ddp-train").c_str(), X_OK) != 0) GTEST_SKIP() << "ddp-train not built";
    const char* classes[] = {"cat", "dog", "fox"};
    for (int c = 0; c < 3; ++c) {
      std::filesystem::create_directories(dir_.File(absl::StrCat("train/", classes[c])));
      std::filesystem::create_directories(dir_.File(absl::StrCat("val/", classes[c])));
      for (int i = 0; i < 10; ++i) {
        WriteFile(dir_.File(absl::StrCat("train/", classes[c], "/", i, ".jpg")),
                  ::ddprun::testing::MakeClassJpeg(c, i));
      }
      for (int i = 0; i < 3; ++i) {
        WriteFile(dir_.File(absl::StrCat("val/", classes[c], "/v", i, ".JPEG")),
                  ::ddprun::testing::MakeClassJpeg(c, 100 + i));
      }
    }
    WriteFile(dir_.File("train/dog/corrupt.jpg"), "definitely not a JPEG");
    // A valid signature but cut in half: found only when decoded, in validation (every image).
    const std::string jpeg = ::ddprun::testing::MakeClassJpeg(1, 99);
    WriteFile(dir_.File("val/dog/truncated.jpg"), jpeg.substr(0, jpeg.size() / 2));
  }

  std::vector<std::string> Train(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {BinPath("ddp-train"),
                                     "imagenet",
                                     "--data",
                                     dir_.File("train"),
                                     "--arch",
                                     "resnet18",
                                     "--image-size",
                                     "32",
                                     "--batch-size",
                                     "4",
                                     "--workers",
                                     "2",
                                     "--print-freq",
                                     "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  static std::string Describe(Subprocess& p) {
    return absl::StrCat("stdout:\n", p.out(), "\nstderr:\n", p.err());
  }

  std::vector<nlohmann::json> Metrics() {
    std::vector<nlohmann::json> out;
    for (absl::string_view line : absl::StrSplit(ReadFile(dir_.File("m.jsonl")), '\n')) {
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
    }
    return out;
  }

  TempDir dir_;
};

TEST_F(ImageNetTrainTest, BadFoldersExitTwoNamingTheProblem) {
  std::filesystem::create_directories(dir_.File("train/empty_class"));
  std::filesystem::create_directories(dir_.File("val/wolf"));
  WriteFile(dir_.File("val/wolf/w.jpg"), ::ddprun::testing::MakeClassJpeg(0, 7));
  {
    Subprocess p(Train({"--epochs", "1"}), {{"TORCHELASTIC_ERROR_FILE", dir_.File("err.json")}});
    std::optional<ExitStatus> st = p.Wait(seconds(60));
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << Describe(p);
    EXPECT_THAT(p.err(), HasSubstr("empty_class"));
    EXPECT_THAT(ReadFile(dir_.File("err.json")), HasSubstr("empty_class"));
  }
  std::filesystem::remove(dir_.File("train/empty_class"));
  {
    Subprocess p(Train({"--val-path", dir_.File("val")}));
    std::optional<ExitStatus> st = p.Wait(seconds(60));
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << Describe(p);
    EXPECT_THAT(p.err(), HasSubstr("training set lacks: wolf"));
  }
  {
    Subprocess p({BinPath("ddp-train"), "imagenet", "--data", dir_.File("missing")});
    std::optional<ExitStatus> st = p.Wait(seconds(60));
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 2) << Describe(p);
    EXPECT_THAT(p.err(), HasSubstr("does not exist"));
  }
}

TEST_F(ImageNetTrainTest, TwoRanksUnderDdprunCheckpointAndResume) {
  if (access(BinPath("ddprun").c_str(), X_OK) != 0) GTEST_SKIP() << "ddprun not built";
  auto launch = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {BinPath("ddprun"), "--standalone", "--nproc-per-node=2",
                                     "--no-python"};
    std::vector<std::string> train =
        Train({"--val-path", dir_.File("val"), "--checkpoints-path", dir_.File("ckpt"),
               "--metrics-file", dir_.File("m.jsonl"), "--max-steps", "3", "--lr", "0.05",
               "--warmup-epochs", "0.5", "--lr-schedule", "cosine"});
    argv.insert(argv.end(), train.begin(), train.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  {
    Subprocess p(launch({"--epochs", "1"}), {{"TORCHELASTIC_ERROR_FILE", "\x01unset"}});
    std::optional<ExitStatus> st = p.Wait(seconds(120));
    ASSERT_TRUE(st.has_value());
    ASSERT_EQ(st->exit_code, 0) << Describe(p);
    EXPECT_THAT(p.out(), HasSubstr("world_size 2"));
    EXPECT_THAT(p.out(), HasSubstr("skipped 1 non-image or corrupt file"));
    EXPECT_THAT(p.out(), HasSubstr("Epoch: [1][3/4]"));  // 30 images / 2 ranks / batch 4
    EXPECT_THAT(p.out(), HasSubstr("Acc@5 100.000"));    // 3 classes: top-5 is everything
    EXPECT_THAT(p.out(), HasSubstr("(9 images)"));       // the truncated one dropped
    EXPECT_THAT(p.out(), HasSubstr("skipped image " + dir_.File("val/dog/truncated.jpg")));
    EXPECT_THAT(p.out(), HasSubstr("skipped_images 1 "));
    EXPECT_THAT(p.out(), HasSubstr("checkpoint: saved step 3 (end of epoch, best so far"));
  }
  EXPECT_EQ(ReadFile(dir_.File("ckpt/LATEST")), "ckpt-000000000003.ddpt\n");
  EXPECT_EQ(ReadFile(dir_.File("ckpt/best/LATEST")), "ckpt-000000000003.ddpt\n");
  {
    Subprocess p(launch({"--epochs", "2", "--resume", "--channels-last"}),
                 {{"TORCHELASTIC_ERROR_FILE", "\x01unset"}});
    std::optional<ExitStatus> st = p.Wait(seconds(120));
    ASSERT_TRUE(st.has_value());
    ASSERT_EQ(st->exit_code, 0) << Describe(p);
    EXPECT_THAT(p.out(), HasSubstr("resumed from checkpoint: epoch 2, sample offset 0, step 3"));
    EXPECT_THAT(p.out(), HasSubstr("Epoch: [2][1/4]"));
    EXPECT_THAT(p.out(), HasSubstr("checkpoint: saved step 6"));
    EXPECT_THAT(p.out(), HasSubstr("skipped_images 1 "));
  }
  std::vector<nlohmann::json> m = Metrics();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["epoch"], 1);
  EXPECT_EQ(m[0]["global_step"], 3);
  EXPECT_EQ(m[0]["resumed"], false);
  EXPECT_EQ(m[1]["epoch"], 2);
  EXPECT_EQ(m[1]["global_step"], 6);
  EXPECT_EQ(m[1]["resumed"], true);
  EXPECT_EQ(m[1]["world_size"], 2);
  EXPECT_EQ(ReadFile(dir_.File("ckpt/LATEST")), "ckpt-000000000006.ddpt\n");

  // --evaluate: one process validates the latest checkpoint and trains nothing.
  Subprocess p({BinPath("ddp-train"), "imagenet", "--data", dir_.File("train"), "--val-path",
                dir_.File("val"), "--image-size", "32", "--checkpoints-path", dir_.File("ckpt"),
                "--resume", "--evaluate"},
               {{"RANK", "\x01unset"}, {"WORLD_SIZE", "\x01unset"}, {"SLURM_PROCID", "\x01unset"}});
  std::optional<ExitStatus> st = p.Wait(seconds(60));
  ASSERT_TRUE(st.has_value());
  ASSERT_EQ(st->exit_code, 0) << Describe(p);
  EXPECT_THAT(p.out(), HasSubstr("resumed from checkpoint: epoch 3, sample offset 0, step 6"));
  EXPECT_THAT(p.out(), HasSubstr(" * Acc@1 "));
  EXPECT_THAT(p.out(), HasSubstr("(9 images)"));
  EXPECT_THAT(p.out(), ::testing::Not(HasSubstr("Epoch: [")));
  EXPECT_EQ(ReadFile(dir_.File("ckpt/LATEST")), "ckpt-000000000006.ddpt\n");
}

// SIGTERM mid-epoch: the worker finishes its step, saves a checkpoint that records how far into
// the epoch it got, exits 143; the next run continues from exactly that step and offset.
TEST_F(ImageNetTrainTest, SigtermCheckpointsMidEpochAndResumesThere) {
  const std::map<std::string, std::string> solo = {{"RANK", "\x01unset"},
                                                   {"WORLD_SIZE", "\x01unset"},
                                                   {"SLURM_PROCID", "\x01unset"},
                                                   {"OMP_NUM_THREADS", "1"}};
  const std::vector<std::string> args = Train({"--checkpoints-path", dir_.File("ckpt"), "--epochs",
                                               "1000", "--metrics-file", dir_.File("m.jsonl")});
  std::string saved_step, saved_epoch;
  {
    Subprocess p(args, solo);
    ASSERT_TRUE(p.WaitForOutputContains("Epoch: [1][2/8]", seconds(60))) << Describe(p);
    p.Signal(SIGTERM);
    std::optional<ExitStatus> st = p.Wait(seconds(60));
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->exit_code, 143) << Describe(p);
    EXPECT_THAT(p.out(), HasSubstr("stop requested (signal 15)"));
    std::smatch match;
    const std::string out = p.out();
    ASSERT_TRUE(std::regex_search(
        out, match, std::regex(R"(saved step (\d+) \(stop, epoch (\d+) offset (\d+))")))
        << out;
    saved_step = match[1];
    saved_epoch = match[2];
    // Within the first epoch (30 images, 8 steps of 4) unless the whole epoch ran first.
    if (match[2] == "1") {
      EXPECT_EQ(std::stoi(match[3]), 4 * std::stoi(saved_step));
    }
  }
  Subprocess p(args, solo);
  ASSERT_TRUE(p.WaitForOutputContains("resumed from checkpoint", seconds(60))) << Describe(p);
  ASSERT_TRUE(p.WaitForOutputContains("ddp-train imagenet:", seconds(60))) << Describe(p);
  EXPECT_THAT(p.out(), HasSubstr(", step " + saved_step + ","));
  // The next progress line is the step after the saved one.
  const int next = std::stoi(saved_step) + 1;
  if (saved_epoch == "1" && next <= 8) {
    ASSERT_TRUE(p.WaitForOutputContains(absl::StrCat("Epoch: [1][", next, "/8]"), seconds(60)))
        << Describe(p);
    EXPECT_THAT(p.out(), ::testing::Not(HasSubstr("Epoch: [1][1/8]")));
  }
  ASSERT_TRUE(p.WaitForOutputContains("Epoch: [", seconds(60))) << Describe(p);
  p.Signal(SIGTERM);
  std::optional<ExitStatus> st = p.Wait(seconds(60));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code, 143) << Describe(p);
}

}  // namespace
}  // namespace ddprun::trainer
