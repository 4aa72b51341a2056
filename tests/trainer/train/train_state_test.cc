#include "trainer/train/train_state.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstring>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/io/archive_check.h"
#include "trainer/train/rng_state.h"

namespace ddprun::trainer {
namespace {

using ::testing::HasSubstr;

void OneStep(MnistNet& model, Adadelta& opt) {
  opt.ZeroGrad();
  torch::nll_loss(model->forward(torch::randn({3, 1, 28, 28})), torch::tensor({1, 2, 3}))
      .backward();
  opt.Step();
}

TEST(TrainStateTest, RoundTripRestoresEverything) {
  torch::manual_seed(1);
  MnistNet a;
  Adadelta opt_a(a->parameters(), {0.5});
  OneStep(a, opt_a);
  TrainProgress p;
  p.epoch = 3;
  p.epoch_offset = 1280;
  p.global_step = 77;
  p.epoch_loss_sum = 12.5;
  p.epoch_loss_steps = 10;
  p.world_size = 2;
  absl::StatusOr<std::string> bytes = SerializeTrainState(a, opt_a, p);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const torch::Tensor next_random = torch::rand({4});  // drawn after the state was saved

  torch::manual_seed(42);
  MnistNet b;
  Adadelta opt_b(b->parameters(), {});
  TrainProgress q;
  ASSERT_TRUE(DeserializeTrainState(*bytes, b, opt_b, &q).ok());
  EXPECT_EQ(q.epoch, 3);
  EXPECT_EQ(q.epoch_offset, 1280);
  EXPECT_EQ(q.global_step, 77);
  EXPECT_EQ(q.epoch_loss_steps, 10);
  EXPECT_EQ(q.world_size, 2);
  EXPECT_DOUBLE_EQ(q.epoch_loss_sum, 12.5);
  EXPECT_DOUBLE_EQ(opt_b.lr(), 0.5);
  EXPECT_EQ(opt_b.steps(), 1);
  // The RNG continues where it was when saved.
  EXPECT_TRUE(torch::equal(torch::rand({4}), next_random));
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
  // Same optimizer state: one more identical step keeps them identical.
  torch::manual_seed(7);
  OneStep(a, opt_a);
  torch::manual_seed(7);
  OneStep(b, opt_b);
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

TEST(TrainStateTest, OtherShapeRefusedAndNothingModified) {
  torch::manual_seed(1);
  MnistNet a;
  torch::serialize::OutputArchive archive;
  const std::string name = kMnistNetName;
  torch::Tensor name_t = torch::empty({static_cast<int64_t>(name.size())}, torch::kUInt8);
  std::memcpy(name_t.data_ptr<uint8_t>(), name.data(), name.size());
  archive.write("model_name", name_t, true);
  for (const auto& item : a->named_parameters()) {
    torch::Tensor t = item.value().detach();
    if (item.key() == "fc2.weight") t = torch::zeros({5, 128});
    archive.write("model/" + item.key(), t, false);
  }
  std::ostringstream out;
  archive.save_to(out);

  torch::manual_seed(2);
  MnistNet b;
  const torch::Tensor before = b->parameters()[0].detach().clone();
  Adadelta opt(b->parameters(), {});
  TrainProgress q;
  absl::Status s = DeserializeTrainState(out.str(), b, opt, &q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("fc2.weight"));
  EXPECT_THAT(s.message(), HasSubstr("shape"));
  EXPECT_TRUE(torch::equal(b->parameters()[0], before));
}

TEST(TrainStateTest, OtherModelOrGarbageRefused) {
  MnistNet b;
  Adadelta opt(b->parameters(), {});
  TrainProgress q;
  EXPECT_EQ(DeserializeTrainState("not an archive", b, opt, &q).code(),
            absl::StatusCode::kInvalidArgument);
  torch::serialize::OutputArchive archive;
  archive.write("something", torch::ones({2}), true);
  std::ostringstream out;
  archive.save_to(out);
  absl::Status s = DeserializeTrainState(out.str(), b, opt, &q);
  EXPECT_THAT(s.message(), HasSubstr("not of model"));
}

// RngState through an archive (trainer/train/rng_state.h): the draws after a restore repeat the
// draws after the capture; an archive without the CPU state is refused. A CPU model writes no
// GPU state (the CUDA half ran on an H200: bench/RESULTS.md, issue 27).
TEST(RngStateTest, AnArchivedStateRepeatsTheSameDraws) {
  torch::manual_seed(5);
  torch::serialize::OutputArchive out;
  RngState::Capture(torch::kCPU).Write(out);
  const torch::Tensor first = torch::rand({8});
  std::ostringstream bytes;
  out.save_to(bytes);

  torch::manual_seed(99);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  std::optional<RngState> state = RngState::Read(in, torch::kCPU);
  ASSERT_TRUE(state.has_value());
  state->Restore();
  EXPECT_TRUE(torch::rand({8}).equal(first));
  torch::Tensor gpu;
  EXPECT_FALSE(in.try_read("rng/cuda", gpu, true));

  torch::serialize::OutputArchive empty;
  std::ostringstream empty_bytes;
  empty.write("unrelated", torch::zeros({1}), true);
  empty.save_to(empty_bytes);
  torch::serialize::InputArchive none;
  std::istringstream none_read(empty_bytes.str());
  none.load_from(none_read);
  EXPECT_FALSE(RngState::Read(none, torch::kCPU).has_value());
}

TEST(RngStateTest, TheDeviceOfParametersIsTheFirstOnesOrTheCpu) {
  EXPECT_TRUE(DeviceOf({}).is_cpu());
  EXPECT_TRUE(DeviceOf({torch::zeros({1})}).is_cpu());
}

// What a peer sends is checked before torch::jit::load sees it: loading runs the archive's
// TorchScript __setstate__ and allocates what its zip directory claims.
std::string TrainStateBytes() {
  torch::manual_seed(1);
  MnistNet model;
  Adadelta opt(model->parameters(), {0.5});
  OneStep(model, opt);
  absl::StatusOr<std::string> bytes = SerializeTrainState(model, opt, TrainProgress{});
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

// A zip of `records` as LibTorch writes one (stored records, aligned).
std::string Zip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  });
  for (const auto& [name, data] : records) writer.writeRecord(name, data.data(), data.size());
  writer.writeEndOfFile();
  return out;
}

// The first central directory header's field at `offset` (little-endian, `width` bytes).
void PatchCentral(std::string& zip, size_t offset, uint64_t value, size_t width) {
  const size_t at = zip.find("PK\x01\x02");
  ASSERT_NE(at, std::string::npos);
  for (size_t i = 0; i < width; ++i) zip[at + offset + i] = static_cast<char>(value >> (8 * i));
}

TEST(ArchiveCheckTest, ATrainStateOfOurOwnIsDataOnly) {
  const std::string bytes = TrainStateBytes();
  const absl::Status s = CheckDataOnlyArchive(bytes);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(ArchiveCheckTest, CodeWithAMethodIsRefused) {
  const std::string code =
      "class Module(Module):\n  __parameters__ = []\n  def __setstate__(self: __torch__.Module,"
      " state: Tuple[Tensor, bool]) -> NoneType:\n    print(\"CODE FROM A PEER RAN\")\n";
  const absl::Status s = CheckDataOnlyArchive(
      Zip({{"data.pkl", "x"}, {"code/__torch__.py", code}, {"version", "3\n"}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("code/__torch__.py: TorchScript code with a method"));
  EXPECT_THAT(
      CheckDataOnlyArchive(Zip({{"data.pkl", "c__torch__.torch.classes.q\nP\n"}})).message(),
      HasSubstr("data.pkl: a TorchScript custom class"));
}

TEST(ArchiveCheckTest, SizesAndRecordsThatAreNotOursAreRefused) {
  const std::string good = TrainStateBytes();
  std::string deflated = good;
  PatchCentral(deflated, 10, 8, 2);  // method: deflate, over bytes that are not deflated
  EXPECT_THAT(CheckDataOnlyArchive(deflated).message(),
              HasSubstr("a compressed record that does not inflate to its size"));
  PatchCentral(deflated, 24, 0x40000000, 4);  // and claiming 1 GiB once inflated
  EXPECT_THAT(CheckDataOnlyArchive(deflated).message(),
              HasSubstr("a compressed record of 1073741824 bytes (at most 1048576)"));
  std::string bzip2 = good;
  PatchCentral(bzip2, 10, 12, 2);
  EXPECT_THAT(CheckDataOnlyArchive(bzip2).message(), HasSubstr("compression method 12"));
  std::string huge = good;
  PatchCentral(huge, 20, 0x7fffffff, 4);  // compressed size
  PatchCentral(huge, 24, 0x7fffffff, 4);  // size
  EXPECT_THAT(CheckDataOnlyArchive(huge).message(), HasSubstr("its bytes lie beyond the zip"));
  std::string elsewhere = good;
  PatchCentral(elsewhere, 42, 0x7ffffff0, 4);  // local header offset
  EXPECT_THAT(CheckDataOnlyArchive(elsewhere).message(), HasSubstr("no local header"));
  EXPECT_THAT(CheckDataOnlyArchive(good.substr(0, good.size() / 2)).message(),
              HasSubstr("not an archive of ddp-train's"));
  EXPECT_THAT(CheckDataOnlyArchive("").message(), HasSubstr("too short for a zip"));
  EXPECT_THAT(CheckDataOnlyArchive(std::string(4096, '\0')).message(),
              HasSubstr("no end of central directory"));
}

}  // namespace
}  // namespace ddprun::trainer
