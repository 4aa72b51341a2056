#include "trainer/train/mnist_trainer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "trainer/io/mnist_data.h"
#include "trainer/io/progress.h"
#include "trainer/train/adadelta.h"
#include "trainer/train/distributed_sampler.h"
#include "trainer/train/mnist_net.h"
#include "trainer/train/train_state.h"
#include "trainer/train/trainer.h"

namespace ddprun::trainer {
namespace {

constexpr double kMnistMean = 0.1307;  // torchvision's Normalize((0.1307,), (0.3081,))
constexpr double kMnistStd = 0.3081;

// Images [N, 1, rows, cols] float, normalised once; labels [N] int64.
struct SplitTensors {
  torch::Tensor images;
  torch::Tensor labels;
  int64_t count = 0;
};

SplitTensors ToTensors(const MnistSplit& split) {
  SplitTensors t;
  t.count = split.count;
  torch::Tensor raw = torch::from_blob(const_cast<uint8_t*>(split.images.data()),
                                       {split.count, 1, split.rows, split.cols}, torch::kUInt8);
  t.images = raw.to(torch::kFloat32).div_(255.0).sub_(kMnistMean).div_(kMnistStd);
  t.labels =
      torch::from_blob(const_cast<uint8_t*>(split.labels.data()), {split.count}, torch::kUInt8)
          .to(torch::kInt64);
  return t;
}

torch::Tensor IndexTensor(const std::vector<int64_t>& idx, size_t begin, size_t end,
                          torch::Device device) {
  // No copy on CPU (to() returns the same tensor); one small host-to-device copy on CUDA.
  return torch::from_blob(const_cast<int64_t*>(idx.data() + begin),
                          {static_cast<int64_t>(end - begin)}, torch::kInt64)
      .to(device);
}

class MnistTrainer : public Trainer {
 public:
  MnistTrainer(const MnistOptions& options, const DistEnv& env, StopSignal* stop, std::ostream& log,
               std::optional<MnistData> preloaded)
      : Trainer(options, env, stop, log, /*control_slots=*/2, /*keeps_best=*/false),
        mnist_(options),
        preloaded_(std::move(preloaded)) {}

  absl::StatusOr<MnistOutcome> Run();

 private:
  absl::Status SetupData() override;
  absl::Status BuildModel() override;
  torch::nn::Module& Model() override { return *model_; }
  absl::StatusOr<std::string> Serialize() override;
  absl::Status Restore(absl::string_view payload) override;
  std::string Banner() const override;
  absl::Status BeginEpoch() override;
  absl::StatusOr<std::optional<StepResult>> TrainStep(bool stop_vote) override;
  void ShowProgress(const StepResult& step, double samples_per_s) override;
  void EndEpoch() override;
  absl::Status Evaluate(EpochMetrics* m, bool* best) override;
  // DDP's invariant, checked once per epoch: every rank holds rank 0's parameters.
  absl::Status CheckReplicasInSync();

  const MnistOptions& mnist_;
  std::optional<MnistData> preloaded_;  // taken by SetupData
  MnistData data_;
  SplitTensors train_, test_;
  MnistNet model_{nullptr};
  std::unique_ptr<Adadelta> optimizer_;
  std::unique_ptr<ProgressReporter> progress_;
  double test_acc_ = 0;  // of the last evaluated epoch
  // The epoch in progress: this rank's sample order from the resume point, the next batch.
  std::vector<int64_t> indices_;
  size_t next_ = 0;
  int64_t steps_in_epoch_ = 0;
};

absl::Status MnistTrainer::SetupData() {
  if (preloaded_.has_value()) {
    data_ = *std::move(preloaded_);
    preloaded_.reset();
  } else {
    DDPRUN_ASSIGN_OR_RETURN(data_, LoadMnist(options_.data_dir));
  }
  TruncateSplit(data_.train, mnist_.train_subset);
  TruncateSplit(data_.test, mnist_.test_subset);
  if (data_.train.rows != 28 || data_.train.cols != 28) {
    return absl::InvalidArgumentError(absl::StrCat(options_.data_dir, ": images are ",
                                                   data_.train.rows, "x", data_.train.cols,
                                                   ", the MNIST network needs 28x28"));
  }
  train_ = ToTensors(data_.train);
  test_ = ToTensors(data_.test);
  for (SplitTensors* t : {&train_, &test_}) {
    t->images = t->images.to(device_);
    t->labels = t->labels.to(device_);
  }
  // The tensors own copies now; drop the byte vectors.
  data_ = MnistData();
  return absl::OkStatus();
}

absl::Status MnistTrainer::BuildModel() {
  model_ = MnistNet();
  model_->to(device_);
  optimizer_ = std::make_unique<Adadelta>(model_->parameters(), AdadeltaOptions{options_.lr});
  return absl::OkStatus();
}

absl::StatusOr<std::string> MnistTrainer::Serialize() {
  return SerializeTrainState(model_, *optimizer_, state_);
}

absl::Status MnistTrainer::Restore(absl::string_view payload) {
  return DeserializeTrainState(payload, model_, *optimizer_, &state_);
}

std::string MnistTrainer::Banner() const {
  return absl::StrFormat(
      "ddp-train mnist: world_size %d rank %d backend %s device %s threads %d train %d test %d "
      "batch %d epochs %d restart %d",
      world(), comm_->rank(), CommBackendName(backend_), device_.str(), torch::get_num_threads(),
      train_.count, test_.count, options_.batch_size, options_.epochs, restart_count());
}

absl::Status MnistTrainer::BeginEpoch() {
  optimizer_->set_lr(options_.lr * std::pow(mnist_.gamma, static_cast<double>(state_.epoch - 1)));
  DistributedSampler sampler(
      {train_.count, world(), comm_->rank(), /*shuffle=*/true, mnist_.sampler_seed});
  indices_ = sampler.Indices(state_.epoch, state_.epoch_offset);
  next_ = 0;
  const size_t batch = static_cast<size_t>(options_.batch_size);
  steps_in_epoch_ =
      state_.epoch_loss_steps + static_cast<int64_t>((indices_.size() + batch - 1) / batch);
  model_->train();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StepResult>> MnistTrainer::TrainStep(bool stop_vote) {
  if (next_ >= indices_.size() || (mnist_.dry_run && next_ > 0)) return std::nullopt;
  const size_t begin = next_;
  const size_t end = std::min(indices_.size(), begin + static_cast<size_t>(options_.batch_size));
  next_ = end;
  torch::Tensor idx = IndexTensor(indices_, begin, end, device_);
  torch::Tensor x = train_.images.index_select(0, idx);
  torch::Tensor y = train_.labels.index_select(0, idx);
  optimizer_->ZeroGrad();
  torch::Tensor loss = torch::nll_loss(model_->forward(x), y);
  sync_->Begin({stop_vote ? 1.0f : 0.0f, loss.item<float>()});
  loss.backward();
  std::vector<float> control;
  DDPRUN_RETURN_IF_ERROR(sync_->Finish(&control));
  DDPRUN_RETURN_IF_ERROR(MayCommitStep());
  optimizer_->Step();
  StepResult step;
  step.consumed = static_cast<int64_t>(end - begin) * world();
  step.samples = step.consumed;
  step.loss = control[1] / world();
  step.lr = optimizer_->lr();
  step.stop = control[0] > 0;
  return step;
}

void MnistTrainer::ShowProgress(const StepResult& step, double samples_per_s) {
  // Made by the first rank 0 that shows progress (with in-process recovery, the process that is
  // rank 0 may change from one round to the next).
  if (progress_ == nullptr) {
    progress_ = std::make_unique<ProgressReporter>(
        log_, mnist_.progress_bar && isatty(STDOUT_FILENO), options_.log_interval);
  }
  progress_->Step(state_.epoch, state_.epoch_loss_steps, steps_in_epoch_,
                  std::min(state_.epoch_offset, train_.count), train_.count, step.loss,
                  samples_per_s, state_.global_step);
}

void MnistTrainer::EndEpoch() {
  if (progress_ != nullptr) progress_->EndEpoch();
}

absl::Status MnistTrainer::Evaluate(EpochMetrics* m, bool* /*best*/) {
  DDPRUN_RETURN_IF_ERROR(CheckReplicasInSync());
  DistributedSampler sampler({test_.count, world(), comm_->rank(), /*shuffle=*/false, 0});
  const std::vector<int64_t> indices = sampler.IndicesWithoutPadding(0);
  model_->eval();
  double loss_sum = 0;
  int64_t correct = 0;
  {
    torch::NoGradGuard no_grad;
    const size_t batch = static_cast<size_t>(mnist_.test_batch_size);
    for (size_t begin = 0; begin < indices.size(); begin += batch) {
      ReportAlive();
      const size_t end = std::min(indices.size(), begin + batch);
      torch::Tensor idx = IndexTensor(indices, begin, end, device_);
      torch::Tensor out = model_->forward(test_.images.index_select(0, idx));
      torch::Tensor y = test_.labels.index_select(0, idx);
      loss_sum += torch::nll_loss(out, y, {}, at::Reduction::Sum).item<double>();
      correct += out.argmax(1).eq(y).sum().item<int64_t>();
    }
  }
  torch::Tensor totals =
      torch::tensor({loss_sum, static_cast<double>(correct), static_cast<double>(indices.size())},
                    torch::kFloat64)
          .to(device_);
  DDPRUN_RETURN_IF_ERROR(comm_->AllReduceSum(totals));
  totals = totals.to(torch::kCPU);
  auto t = totals.accessor<double, 1>();
  m->test_loss = t[2] > 0 ? t[0] / t[2] : 0;
  m->test_acc = t[2] > 0 ? t[1] / t[2] : 0;
  m->lr = optimizer_->lr();
  test_acc_ = m->test_acc;
  Log(absl::StrFormat(
      "Test set: Average loss: %.4f, Accuracy: %d/%d (%.2f%%)\n"
      "epoch %d samples_per_s %.1f train_s %.2f test_acc %.4f train_loss %.4f world_size %d",
      m->test_loss, static_cast<int64_t>(t[1]), static_cast<int64_t>(t[2]), 100 * m->test_acc,
      m->epoch, m->samples_per_s, m->train_s, m->test_acc, m->train_loss, m->world_size));
  return absl::OkStatus();
}

absl::Status MnistTrainer::CheckReplicasInSync() {
  if (world() == 1) return absl::OkStatus();
  // Per-tensor sums and sums of squares (float64): a cheap fingerprint, 2 numbers per tensor.
  std::vector<std::string> names;
  std::vector<torch::Tensor> parts;
  {
    torch::NoGradGuard no_grad;
    for (const auto& item : model_->named_parameters()) {
      torch::Tensor p = item.value().detach().to(torch::kFloat64);
      names.push_back(item.key());
      parts.push_back(p.sum().reshape({1}));
      parts.push_back(p.pow(2).sum().reshape({1}));
    }
  }
  torch::Tensor mine = torch::cat(parts).to(torch::kCPU);
  torch::Tensor leader = mine.clone().to(device_);
  DDPRUN_RETURN_IF_ERROR(comm_->Broadcast(leader, 0));
  leader = leader.to(torch::kCPU);
  // Identical updates from an identical all-reduced buffer keep replicas bit-identical; the
  // tolerance only forgives a summation-order difference in this fingerprint itself.
  torch::Tensor bad = (mine - leader).abs() > 1e-9 * (1 + leader.abs());
  const bool diverged = bad.any().item<bool>();
  // Agree on the verdict, so that every rank stops with the same story.
  torch::Tensor count = torch::tensor({diverged ? 1.0f : 0.0f}).to(device_);
  DDPRUN_RETURN_IF_ERROR(comm_->AllReduceSum(count));
  if (diverged) {
    const int64_t i = bad.nonzero()[0][0].item<int64_t>();
    return absl::InternalError(absl::StrFormat(
        "rank %d: parameter %s differs from rank 0 after epoch %d: the replicas diverged",
        comm_->rank(), names[i / 2], state_.epoch));
  }
  if (count.item<float>() > 0) {
    return absl::InternalError(
        absl::StrFormat("%d rank(s) hold parameters that differ from rank 0's after epoch %d: "
                        "the replicas diverged",
                        static_cast<int>(count.item<float>()), state_.epoch));
  }
  Log(absl::StrFormat("replicas in sync: %d parameter tensors identical on %d ranks", names.size(),
                      world()));
  return absl::OkStatus();
}

absl::StatusOr<MnistOutcome> MnistTrainer::Run() {
  DDPRUN_RETURN_IF_ERROR(Start());
  MnistOutcome outcome;
  DDPRUN_ASSIGN_OR_RETURN(outcome.stop_signal, TrainEpochs());
  if (outcome.stop_signal == 0 && mnist_.save_model && leader()) {
    try {
      torch::save(model_, mnist_.save_model_path);
      Log(absl::StrCat("model saved to ", mnist_.save_model_path));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat(mnist_.save_model_path, ": ", FirstLine(e.what())));
    }
  }
  outcome.test_acc = test_acc_;
  outcome.global_step = state_.global_step;
  return outcome;
}

}  // namespace

absl::StatusOr<MnistOutcome> RunMnist(const MnistOptions& options, const DistEnv& env,
                                      StopSignal* stop, std::ostream& log,
                                      std::optional<MnistData> preloaded) {
  MnistTrainer trainer(options, env, stop, log, std::move(preloaded));
  return CatchLibTorchErrors([&] { return trainer.Run(); });
}

}  // namespace ddprun::trainer
