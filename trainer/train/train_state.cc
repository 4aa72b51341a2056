#include "trainer/train/train_state.h"

#include <torch/torch.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "trainer/train/rng_state.h"

namespace ddprun::trainer {
namespace {

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

torch::Tensor ModelNameTensor() {
  const std::string name = kMnistNetName;
  torch::Tensor t = torch::empty({static_cast<int64_t>(name.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), name.data(), name.size());
  return t;
}

}  // namespace

absl::StatusOr<std::string> SerializeTrainState(MnistNet& model, const Adadelta& optimizer,
                                                const TrainProgress& progress) {
  try {
    torch::serialize::OutputArchive archive;
    archive.write("model_name", ModelNameTensor(), true);
    for (const auto& item : model->named_parameters()) {
      archive.write(absl::StrCat("model/", item.key()), item.value().detach(), false);
    }
    optimizer.Save(archive);
    torch::Tensor p = torch::tensor({progress.epoch, progress.epoch_offset, progress.global_step,
                                     progress.epoch_loss_steps, int64_t{progress.world_size}},
                                    torch::kInt64);
    archive.write("progress/ints", p, true);
    archive.write("progress/loss_sum", torch::tensor(progress.epoch_loss_sum, torch::kFloat64),
                  true);
    RngState::Capture(DeviceOf(model->parameters())).Write(archive);
    std::ostringstream out;
    archive.save_to(out);
    return out.str();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("serialising train state: ", FirstLine(e.what())));
  }
}

absl::Status DeserializeTrainState(absl::string_view payload, MnistNet& model, Adadelta& optimizer,
                                   TrainProgress* progress) {
  try {
    torch::serialize::InputArchive archive;
    {
      std::istringstream in{std::string(payload)};
      archive.load_from(in);
    }
    torch::Tensor name;
    if (!archive.try_read("model_name", name, true) || !name.equal(ModelNameTensor())) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint is not of model ", kMnistNetName));
    }
    // Read and check everything before modifying anything.
    std::vector<std::pair<torch::Tensor, torch::Tensor>> params;
    for (const auto& item : model->named_parameters()) {
      torch::Tensor t;
      const std::string key = absl::StrCat("model/", item.key());
      if (!archive.try_read(key, t, false)) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint lacks parameter ", item.key()));
      }
      if (!t.sizes().equals(item.value().sizes())) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint parameter ", item.key(), " has shape ", c10::str(t.sizes()),
                         ", the model has ", c10::str(item.value().sizes())));
      }
      params.emplace_back(item.value(), t);
    }
    torch::Tensor ints, loss_sum;
    const std::optional<RngState> rng = RngState::Read(archive, DeviceOf(model->parameters()));
    if (!archive.try_read("progress/ints", ints, true) || ints.numel() != 5 ||
        !archive.try_read("progress/loss_sum", loss_sum, true) || !rng.has_value()) {
      return absl::InvalidArgumentError("checkpoint lacks the training progress or RNG state");
    }
    // The optimizer checks its own shapes before it copies.
    DDPRUN_RETURN_IF_ERROR(optimizer.Load(archive));
    {
      torch::NoGradGuard no_grad;
      for (auto& [dst, src] : params) dst.copy_(src);
    }
    auto v = ints.accessor<int64_t, 1>();
    progress->epoch = v[0];
    progress->epoch_offset = v[1];
    progress->global_step = v[2];
    progress->epoch_loss_steps = v[3];
    progress->world_size = static_cast<int>(v[4]);
    progress->epoch_loss_sum = loss_sum.item<double>();
    rng->Restore();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint payload unreadable: ", FirstLine(e.what())));
  }
}

}  // namespace ddprun::trainer
