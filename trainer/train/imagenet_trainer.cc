#include "trainer/train/imagenet_trainer.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "trainer/image/image_folder.h"
#include "trainer/image/input_pipeline.h"
#include "trainer/io/lr_schedule.h"
#include "trainer/train/distributed_sampler.h"
#include "trainer/train/resnet.h"
#include "trainer/train/trainer.h"

#ifdef DDPRUN_WITH_CUDA
#include <ATen/autocast_mode.h>
#endif

namespace ddprun::trainer {
namespace {

#ifdef DDPRUN_WITH_CUDA
// Mixed precision (bf16) for the CUDA forward pass. torch 2.4 made autocast's switches per
// device type; the CUDA-only calls of torch 1.x/2.0 are deprecated in 2.11.
void SetCudaAutocast(bool enabled) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (enabled) at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
#else
  if (enabled) at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  at::autocast::set_enabled(enabled);
#endif
}
#endif

// Control floats summed across ranks with the last gradient bucket.
enum Control { kStop = 0, kLossSum, kCount, kSkipped, kNumControls };

class ImageNetTrainer : public Trainer {
 public:
  ImageNetTrainer(const ImageNetOptions& options, const DistEnv& env, StopSignal* stop,
                  std::ostream& log)
      : Trainer(options, env, stop, log, kNumControls, /*keeps_best=*/true), imagenet_(options) {}

  absl::StatusOr<ImageNetOutcome> Run();

 private:
  absl::Status SetupData() override;
  absl::Status BuildModel() override;
  torch::nn::Module& Model() override { return *model_; }
  absl::StatusOr<std::string> Serialize() override;
  absl::Status Restore(absl::string_view payload) override;
  std::string ResumeDetail() const override;
  std::string Banner() const override;
  absl::Status BeginEpoch() override;
  absl::StatusOr<std::optional<StepResult>> TrainStep(bool stop_vote) override;
  void ShowProgress(const StepResult& step, double samples_per_s) override;
  void EndEpoch() override { pipeline_.reset(); }  // stops its decode threads
  absl::Status Evaluate(EpochMetrics* m, bool* best) override;

  double LearningRate(double epoch_progress) const;  // epochs done, fractional
  // Top-1 / top-5 on the validation set, all ranks together; kUnavailable etc. on comm errors.
  absl::Status Validate(double* acc1, double* acc5, double* loss);
  void ReportSkipped(const ImageBatch& batch);

  const ImageNetOptions& imagenet_;
  ImageFolder train_, val_;
  ResNet model_{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer_;
  double best_acc1_ = 0;        // checkpointed with the progress
  int64_t skipped_images_ = 0;  // failed to decode, all ranks, since this run started
  // The epoch in progress.
  std::unique_ptr<InputPipeline> pipeline_;
  int64_t my_count_ = 0;  // this rank's samples left in it
  int64_t steps_per_epoch_ = 0;
};

absl::Status ImageNetTrainer::SetupData() {
#ifndef DDPRUN_WITH_CUDA
  if (imagenet_.amp) {
    return absl::InvalidArgumentError("--amp needs a CUDA build of ddp-train (DDPRUN_WITH_CUDA)");
  }
#endif
  if (imagenet_.amp && !device_.is_cuda()) {
    return absl::InvalidArgumentError("--amp (bf16 autocast) needs a CUDA device");
  }
  if (imagenet_.image_size < 16) {
    return absl::InvalidArgumentError("--image-size must be at least 16");
  }
  DDPRUN_ASSIGN_OR_RETURN(train_, ScanImageFolder(options_.data_dir));
  if (!imagenet_.val_dir.empty()) {
    DDPRUN_ASSIGN_OR_RETURN(val_, ScanValidationFolder(imagenet_.val_dir, train_.classes));
  } else if (imagenet_.evaluate) {
    return absl::InvalidArgumentError("--evaluate needs --val-path");
  }
  // Every rank scans the same folders; one copy of the warnings is enough.
  if (leader()) {
    for (const ImageFolder* f : {&train_, &val_}) {
      for (const std::string& w : f->warnings) log_ << "warning: " << w << std::endl;
    }
  }
  if (options_.checkpoint_dir.empty() && options_.resume == ResumeMode::kAlways) {
    return absl::InvalidArgumentError("--resume needs --checkpoints-path");
  }
  return absl::OkStatus();
}

absl::Status ImageNetTrainer::BuildModel() {
  DDPRUN_ASSIGN_OR_RETURN(model_, MakeResNet(imagenet_.arch, train_.classes.size()));
  model_->to(device_);
  if (imagenet_.channels_last) {
    for (torch::Tensor& p : model_->parameters()) {
      if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  optimizer_ = std::make_unique<torch::optim::SGD>(model_->parameters(),
                                                   torch::optim::SGDOptions(options_.lr)
                                                       .momentum(imagenet_.momentum)
                                                       .weight_decay(imagenet_.weight_decay));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ImageNetTrainer::Serialize() {
  try {
    torch::serialize::OutputArchive archive, model, optim;
    model_->save(model);
    optimizer_->save(optim);
    archive.write("model", model);
    archive.write("optimizer", optim);
    archive.write("num_classes", torch::tensor({static_cast<int64_t>(train_.classes.size())}));
    archive.write("progress", torch::tensor({state_.epoch, state_.epoch_offset, state_.global_step,
                                             int64_t{state_.world_size}, state_.epoch_loss_steps}));
    archive.write("progress_f",
                  torch::tensor({best_acc1_, state_.epoch_loss_sum}, torch::kFloat64));
    std::ostringstream out;
    archive.save_to(out);
    return std::move(out).str();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("serialize: ", FirstLine(e.what_without_backtrace())));
  }
}

absl::Status ImageNetTrainer::Restore(absl::string_view payload) {
  try {
    torch::serialize::InputArchive archive, model, optim;
    archive.load_from(payload.data(), payload.size());
    torch::Tensor classes;
    archive.read("num_classes", classes);
    if (classes.item<int64_t>() != static_cast<int64_t>(train_.classes.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("the checkpoint was trained on ", classes.item<int64_t>(),
                       " classes, the data has ", train_.classes.size()));
    }
    archive.read("model", model);
    archive.read("optimizer", optim);
    model_->load(model);
    optimizer_->load(optim);
    torch::Tensor p, f;
    archive.read("progress", p);
    archive.read("progress_f", f);
    auto pa = p.accessor<int64_t, 1>();
    auto fa = f.accessor<double, 1>();
    state_.epoch = pa[0];
    state_.epoch_offset = pa[1];
    state_.global_step = pa[2];
    state_.world_size = static_cast<int>(pa[3]);
    state_.epoch_loss_steps = pa[4];
    best_acc1_ = fa[0];
    state_.epoch_loss_sum = fa[1];
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    // Another --arch, or a file of another program: shapes or names do not match.
    return absl::InvalidArgumentError(FirstLine(e.what_without_backtrace()));
  }
}

std::string ImageNetTrainer::ResumeDetail() const {
  return absl::StrFormat(", best acc@1 %.3f", best_acc1_);
}

std::string ImageNetTrainer::Banner() const {
  return absl::StrFormat(
      "ddp-train imagenet: arch %s world_size %d backend %s device %s threads %d workers %d "
      "train %d images %d classes val %d images batch %d image_size %d epochs %d restart %d",
      imagenet_.arch, world(), CommBackendName(backend_), device_.str(), torch::get_num_threads(),
      imagenet_.workers, train_.samples.size(), train_.classes.size(), val_.samples.size(),
      options_.batch_size, imagenet_.image_size, options_.epochs, restart_count());
}

double ImageNetTrainer::LearningRate(double done) const {
  LrSchedule schedule;
  schedule.kind =
      imagenet_.lr_schedule == "cosine" ? LrSchedule::Kind::kCosine : LrSchedule::Kind::kStep;
  schedule.base_lr = options_.lr;
  schedule.step_epochs = imagenet_.lr_step_epochs;
  schedule.warmup_epochs = imagenet_.warmup_epochs;
  schedule.total_epochs = options_.epochs;
  return LearningRateAt(schedule, done);
}

void ImageNetTrainer::ReportSkipped(const ImageBatch& batch) {
  // Each rank decodes its own shard, so each reports its own failures.
  for (const std::string& e : batch.errors) {
    log_ << "warning: rank " << comm_->rank() << ": skipped image " << e << std::endl;
  }
}

absl::Status ImageNetTrainer::BeginEpoch() {
  const int64_t n = static_cast<int64_t>(train_.samples.size());
  DistributedSampler sampler({n, world(), comm_->rank(), /*shuffle=*/true, options_.seed});
  std::vector<int64_t> indices = sampler.Indices(state_.epoch, state_.epoch_offset);
  const int64_t B = options_.batch_size;
  steps_per_epoch_ = (sampler.NumSamples(0) + B - 1) / B;
  my_count_ = static_cast<int64_t>(indices.size());
  PipelineOptions popt;
  popt.workers = imagenet_.workers;
  popt.batch_size = B;
  popt.transform = {/*train=*/true, imagenet_.image_size};
  popt.seed = options_.seed;
  popt.epoch = state_.epoch;
  pipeline_ = std::make_unique<InputPipeline>(&train_, std::move(indices), popt);
  model_->train();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StepResult>> ImageNetTrainer::TrainStep(bool stop_vote) {
  std::optional<ImageBatch> batch = pipeline_->Next();
  if (!batch.has_value()) return std::nullopt;
  ReportSkipped(*batch);
  const double lr = LearningRate(state_.epoch - 1 +
                                 static_cast<double>(state_.epoch_loss_steps) /
                                     std::max<int64_t>(1, steps_per_epoch_));
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
  optimizer_->zero_grad();
  const int S = imagenet_.image_size;
  torch::Tensor loss;
  if (batch->size > 0) {
    torch::Tensor x = torch::from_blob(batch->images.data(), {batch->size, 3, S, S});
    torch::Tensor y = torch::from_blob(batch->labels.data(), {batch->size}, torch::kInt64);
    if (device_.is_cuda()) {
      // Pinned host memory lets the copy run asynchronously with the previous step's kernels.
      x = x.pin_memory().to(device_, /*non_blocking=*/true);
      y = y.to(device_);
    }
    if (imagenet_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
#ifdef DDPRUN_WITH_CUDA
    if (imagenet_.amp) SetCudaAutocast(true);
#endif
    loss = torch::cross_entropy_loss(model_->forward(x), y);
#ifdef DDPRUN_WITH_CUDA
    if (imagenet_.amp) {
      SetCudaAutocast(false);
      at::autocast::clear_cache();
    }
#endif
  }
  // A rank whose whole batch failed to decode still takes part in the gradient all-reduce
  // (with zero gradients), so the collectives stay matched.
  const float local_loss = loss.defined() ? loss.item<float>() * batch->size : 0.0f;
  sync_->Begin({stop_vote ? 1.0f : 0.0f, local_loss, static_cast<float>(batch->size),
                static_cast<float>(batch->errors.size())});
  if (loss.defined()) loss.backward();
  std::vector<float> control;
  DDPRUN_RETURN_IF_ERROR(sync_->Finish(&control));
  DDPRUN_RETURN_IF_ERROR(MayCommitStep());
  optimizer_->step();

  skipped_images_ += static_cast<int64_t>(control[kSkipped]);
  StepResult step;
  // Positions of the padded global order this step consumed (all ranks take the same count).
  const int64_t B = options_.batch_size;
  step.consumed = std::min(B, my_count_ - batch->index * B) * world();
  step.samples = static_cast<int64_t>(control[kCount]);
  step.loss = control[kCount] > 0 ? control[kLossSum] / control[kCount] : 0.0f;
  step.lr = lr;
  step.stop = control[kStop] > 0;
  return step;
}

void ImageNetTrainer::ShowProgress(const StepResult& step, double samples_per_s) {
  if (state_.epoch_loss_steps % options_.log_interval == 0 ||
      state_.epoch_loss_steps == steps_per_epoch_) {
    Log(absl::StrFormat("Epoch: [%d][%d/%d] loss %.4f lr %.5f images/s %.1f", state_.epoch,
                        state_.epoch_loss_steps, steps_per_epoch_, step.loss, step.lr,
                        samples_per_s));
  }
}

absl::Status ImageNetTrainer::Validate(double* acc1, double* acc5, double* loss) {
  DistributedSampler sampler(
      {static_cast<int64_t>(val_.samples.size()), world(), comm_->rank(), false, 0});
  PipelineOptions popt;
  popt.workers = imagenet_.workers;
  popt.batch_size = options_.batch_size;
  popt.transform = {/*train=*/false, imagenet_.image_size};
  InputPipeline pipeline(&val_, sampler.IndicesWithoutPadding(0), popt);
  const int S = imagenet_.image_size;
  const int64_t k = std::min<int64_t>(5, static_cast<int64_t>(train_.classes.size()));
  double loss_sum = 0, top1 = 0, top5 = 0, count = 0, skipped = 0;
  model_->eval();
  {
    torch::NoGradGuard no_grad;
    while (std::optional<ImageBatch> batch = pipeline.Next()) {
      ReportAlive();
      ReportSkipped(*batch);
      skipped += batch->errors.size();
      if (batch->size == 0) continue;
      torch::Tensor x = torch::from_blob(batch->images.data(), {batch->size, 3, S, S}).to(device_);
      torch::Tensor y =
          torch::from_blob(batch->labels.data(), {batch->size}, torch::kInt64).to(device_);
      if (imagenet_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
      torch::Tensor out = model_->forward(x).to(torch::kFloat32);
      loss_sum += torch::cross_entropy_loss(out, y, {}, at::Reduction::Sum).item<double>();
      torch::Tensor pred = std::get<1>(out.topk(k, 1));  // [n, k], best first
      torch::Tensor hit = pred.eq(y.unsqueeze(1));
      top1 += hit.select(1, 0).sum().item<double>();
      top5 += hit.any(1).sum().item<double>();
      count += batch->size;
    }
  }
  torch::Tensor totals =
      torch::tensor({loss_sum, top1, top5, count, skipped}, torch::kFloat64).to(device_);
  DDPRUN_RETURN_IF_ERROR(comm_->AllReduceSum(totals));
  totals = totals.to(torch::kCPU);
  auto t = totals.accessor<double, 1>();
  *acc1 = t[3] > 0 ? t[1] / t[3] : 0;
  *acc5 = t[3] > 0 ? t[2] / t[3] : 0;
  *loss = t[3] > 0 ? t[0] / t[3] : 0;
  skipped_images_ += static_cast<int64_t>(t[4]);
  Log(absl::StrFormat(" * Acc@1 %.3f Acc@5 %.3f loss %.4f (%d images)", 100 * *acc1, 100 * *acc5,
                      *loss, static_cast<int64_t>(t[3])));
  return absl::OkStatus();
}

absl::Status ImageNetTrainer::Evaluate(EpochMetrics* m, bool* best) {
  // DDP broadcasts BatchNorm's running statistics from rank 0 every forward; once per epoch
  // is enough for what reads them (validation and the checkpoint).
  DDPRUN_RETURN_IF_ERROR(
      GradientSynchronizer::BroadcastFromRankZero(model_->buffers(), comm_.get()));
  double acc5 = 0;
  if (!val_.samples.empty()) {
    DDPRUN_RETURN_IF_ERROR(Validate(&m->test_acc, &acc5, &m->test_loss));
  }
  *best = !val_.samples.empty() && m->test_acc >= best_acc1_;
  best_acc1_ = std::max(best_acc1_, m->test_acc);
  m->lr = LearningRate(state_.epoch - 1);  // at the epoch's start
  Log(absl::StrFormat(
      "epoch %d images_per_s %.1f train_s %.2f train_loss %.4f acc1 %.4f best_acc1 %.4f "
      "skipped_images %d world_size %d step %d",
      m->epoch, m->samples_per_s, m->train_s, m->train_loss, m->test_acc, best_acc1_,
      skipped_images_, m->world_size, m->global_step));
  return absl::OkStatus();
}

absl::StatusOr<ImageNetOutcome> ImageNetTrainer::Run() {
  DDPRUN_RETURN_IF_ERROR(Start());
  ImageNetOutcome outcome;
  if (imagenet_.evaluate) {
    double acc5 = 0, loss = 0;
    DDPRUN_RETURN_IF_ERROR(Validate(&outcome.best_acc1, &acc5, &loss));
  } else {
    DDPRUN_ASSIGN_OR_RETURN(outcome.stop_signal, TrainEpochs());
    outcome.best_acc1 = best_acc1_;
  }
  outcome.global_step = state_.global_step;
  return outcome;
}

}  // namespace

absl::StatusOr<ImageNetOutcome> RunImageNet(const ImageNetOptions& options, const DistEnv& env,
                                            StopSignal* stop, std::ostream& log) {
  ImageNetTrainer trainer(options, env, stop, log);
  return CatchLibTorchErrors([&] { return trainer.Run(); });
}

}  // namespace ddprun::trainer
