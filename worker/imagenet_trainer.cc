#include "worker/imagenet_trainer.h"

#include <signal.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/checkpoint_broadcast.h"
#include "worker/checkpoint_store.h"
#include "worker/comm.h"
#include "worker/distributed_sampler.h"
#include "worker/grad_sync.h"
#include "worker/image_folder.h"
#include "worker/input_pipeline.h"
#include "worker/lr_schedule.h"
#include "worker/metrics.h"
#include "worker/resnet.h"

#ifdef DDPRUN_WITH_CUDA
#include <ATen/autocast_mode.h>
#endif

namespace ddprun::worker {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// What a checkpoint holds besides the model and optimizer.
struct ImageNetProgress {
  int64_t epoch = 1;         // 1-based epoch in progress (or next to start)
  int64_t epoch_offset = 0;  // samples of this epoch's global order already consumed
  int64_t global_step = 0;
  int64_t world_size = 1;  // of the run that saved (informational)
  double best_acc1 = 0;
  double epoch_loss_sum = 0;
  int64_t epoch_loss_steps = 0;
};

// Control floats summed across ranks with the last gradient bucket.
enum Control { kStop = 0, kLossSum, kCount, kSkipped, kNumControls };

class ImageNetTrainer {
 public:
  ImageNetTrainer(const ImageNetOptions& options, const DistEnv& env, const StopSignal* stop,
                  std::ostream& log)
      : options_(options), env_(env), stop_(stop), log_(log), start_(Clock::now()) {}

  absl::StatusOr<ImageNetOutcome> Run();

 private:
  bool leader() const { return comm_->rank() == 0; }
  int world() const { return comm_->world_size(); }
  void Log(const std::string& line) {
    if (leader()) log_ << line << std::endl;
  }

  absl::Status SetupLocal();
  absl::Status AgreeOnSetup(const absl::Status& local);
  absl::Status ResumeOrBroadcast();
  absl::StatusOr<std::string> Serialize();
  absl::Status Deserialize(const char* data, size_t size);
  absl::Status SaveCheckpoint(const char* why, bool best);
  double LearningRate(double epoch_progress) const;  // epochs done, fractional
  absl::StatusOr<bool> TrainEpoch(int64_t* samples, double* train_s);
  // Top-1 / top-5 on the validation set, all ranks together; kUnavailable etc. on comm errors.
  absl::Status Validate(double* acc1, double* acc5, double* loss);
  void ReportSkipped(const ImageBatch& batch);

  const ImageNetOptions& options_;
  const DistEnv& env_;
  const StopSignal* stop_;
  std::ostream& log_;
  Clock::time_point start_;

  std::unique_ptr<Communicator> comm_;
  torch::Device device_{torch::kCPU};
  ImageFolder train_, val_;
  ResNet model_{nullptr};
  std::unique_ptr<torch::optim::SGD> optimizer_;
  std::unique_ptr<GradientSynchronizer> sync_;
  std::unique_ptr<CheckpointStore> store_, best_store_;
  MetricsWriter metrics_;
  ImageNetProgress state_;
  ImageNetOutcome outcome_;
  int peer_stop_ = 0;
  int64_t skipped_images_ = 0;  // failed to decode, all ranks, since this run started
};

absl::Status ImageNetTrainer::SetupLocal() {
  if (options_.image_size < 16) {
    return absl::InvalidArgumentError("--image-size must be at least 16");
  }
  DDPRUN_ASSIGN_OR_RETURN(train_, ScanImageFolder(options_.data_dir));
  if (!options_.val_dir.empty()) {
    DDPRUN_ASSIGN_OR_RETURN(val_, ScanValidationFolder(options_.val_dir, train_.classes));
  } else if (options_.evaluate) {
    return absl::InvalidArgumentError("--evaluate needs --val-path");
  }
  // Every rank scans the same folders; one copy of the warnings is enough.
  if (leader()) {
    for (const ImageFolder* f : {&train_, &val_}) {
      for (const std::string& w : f->warnings) log_ << "warning: " << w << std::endl;
    }
  }
  if (!options_.checkpoints_path.empty()) {
    store_ =
        std::make_unique<CheckpointStore>(options_.checkpoints_path, options_.keep_checkpoints);
    best_store_ = std::make_unique<CheckpointStore>(options_.checkpoints_path + "/best", 1);
    if (leader()) {
      DDPRUN_RETURN_IF_ERROR(
          CheckCheckpointDirectory(store_.get(), options_.checkpoints_path, options_.resume));
      DDPRUN_RETURN_IF_ERROR(best_store_->CheckWritable());
    }
  } else if (options_.resume == ResumeMode::kAlways) {
    return absl::InvalidArgumentError("--resume needs --checkpoints-path");
  }
  if (leader() && !options_.metrics_file.empty()) {
    DDPRUN_RETURN_IF_ERROR(metrics_.Open(options_.metrics_file));
  }
  return absl::OkStatus();
}

absl::Status ImageNetTrainer::AgreeOnSetup(const absl::Status& local) {
  // As in mnist: all ranks stop with a clear line when any failed, none hangs in a collective.
  torch::Tensor failed = torch::tensor({local.ok() ? 0.0f : 1.0f}).to(device_);
  DDPRUN_RETURN_IF_ERROR(comm_->AllReduceSum(failed));
  DDPRUN_RETURN_IF_ERROR(local);
  if (failed.item<float>() > 0) {
    return absl::FailedPreconditionError("another rank failed during setup (see its error)");
  }
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
                                             state_.world_size, state_.epoch_loss_steps}));
    archive.write("progress_f",
                  torch::tensor({state_.best_acc1, state_.epoch_loss_sum}, torch::kFloat64));
    std::ostringstream out;
    archive.save_to(out);
    return std::move(out).str();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("serialize: ", FirstLine(e.what_without_backtrace())));
  }
}

absl::Status ImageNetTrainer::Deserialize(const char* data, size_t size) {
  try {
    torch::serialize::InputArchive archive, model, optim;
    archive.load_from(data, size);
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
    state_ = {pa[0], pa[1], pa[2], pa[3], fa[0], fa[1], pa[4]};
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    // Another --arch, or a file of another program: shapes or names do not match.
    return absl::InvalidArgumentError(FirstLine(e.what_without_backtrace()));
  }
}

absl::Status ImageNetTrainer::ResumeOrBroadcast() {
  DDPRUN_ASSIGN_OR_RETURN(
      std::optional<std::string> payload,
      ReadCheckpointOnAllRanks(store_.get(), options_.resume != ResumeMode::kNever, comm_.get(),
                               device_, log_));
  if (!payload.has_value()) {
    std::vector<torch::Tensor> tensors = model_->parameters();
    for (const torch::Tensor& b : model_->buffers()) tensors.push_back(b);
    return GradientSynchronizer::BroadcastFromRankZero(tensors, comm_.get());
  }
  absl::Status s = Deserialize(payload->data(), payload->size());
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint in ", options_.checkpoints_path, ": ", s.message()));
  }
  Log(absl::StrFormat(
      "resumed from checkpoint: epoch %d, sample offset %d, step %d, best acc@1 %.3f (saved by "
      "world size %d)",
      state_.epoch, state_.epoch_offset, state_.global_step, state_.best_acc1, state_.world_size));
  return absl::OkStatus();
}

absl::Status ImageNetTrainer::SaveCheckpoint(const char* why, bool best) {
  if (store_ == nullptr || !leader()) return absl::OkStatus();
  state_.world_size = world();
  const auto t0 = Clock::now();
  DDPRUN_ASSIGN_OR_RETURN(std::string payload, Serialize());
  absl::Status s = store_->Save(state_.global_step, payload);
  if (s.ok() && best) s = best_store_->Save(state_.global_step, payload);
  if (!s.ok()) {
    // The previous checkpoint is untouched; training goes on and the next save tries again.
    log_ << "warning: checkpoint at step " << state_.global_step << " not saved: " << s.message()
         << std::endl;
    return s;
  }
  Log(absl::StrFormat("checkpoint: saved step %d (%s%s, epoch %d offset %d, %.1f MB) in %.1f ms",
                      state_.global_step, why, best ? ", best so far" : "", state_.epoch,
                      state_.epoch_offset, payload.size() / 1e6, SecondsSince(t0) * 1e3));
  return absl::OkStatus();
}

double ImageNetTrainer::LearningRate(double done) const {
  LrSchedule schedule;
  schedule.kind =
      options_.lr_schedule == "cosine" ? LrSchedule::Kind::kCosine : LrSchedule::Kind::kStep;
  schedule.base_lr = options_.lr;
  schedule.step_epochs = options_.lr_step_epochs;
  schedule.warmup_epochs = options_.warmup_epochs;
  schedule.total_epochs = options_.epochs;
  return LearningRateAt(schedule, done);
}

void ImageNetTrainer::ReportSkipped(const ImageBatch& batch) {
  // Each rank decodes its own shard, so each reports its own failures.
  for (const std::string& e : batch.errors) {
    log_ << "warning: rank " << comm_->rank() << ": skipped image " << e << std::endl;
  }
}

absl::StatusOr<bool> ImageNetTrainer::TrainEpoch(int64_t* samples, double* train_s) {
  const int64_t epoch = state_.epoch;
  const int64_t n = static_cast<int64_t>(train_.samples.size());
  DistributedSampler sampler({n, world(), comm_->rank(), /*shuffle=*/true, options_.seed});
  std::vector<int64_t> indices = sampler.Indices(epoch, state_.epoch_offset);
  const int64_t B = options_.batch_size;
  const int64_t steps_per_epoch = (sampler.NumSamples(0) + B - 1) / B;
  const int64_t my_count = static_cast<int64_t>(indices.size());
  PipelineOptions popt;
  popt.workers = options_.workers;
  popt.batch_size = B;
  popt.transform = {/*train=*/true, options_.image_size};
  popt.seed = options_.seed;
  popt.epoch = epoch;
  InputPipeline pipeline(&train_, std::move(indices), popt);
  const int S = options_.image_size;
  model_->train();
  const auto t0 = Clock::now();
  bool stop = false;
  while (!stop) {
    std::optional<ImageBatch> batch = pipeline.Next();
    if (!batch.has_value()) break;
    ReportSkipped(*batch);
    const double lr = LearningRate(epoch - 1 +
                                   static_cast<double>(state_.epoch_loss_steps) /
                                       std::max<int64_t>(1, steps_per_epoch));
    for (auto& group : optimizer_->param_groups()) {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
    }
    optimizer_->zero_grad();
    const int local_signal = stop_ != nullptr ? stop_->received() : 0;
    torch::Tensor loss;
    if (batch->size > 0) {
      torch::Tensor x = torch::from_blob(batch->images.data(), {batch->size, 3, S, S});
      torch::Tensor y = torch::from_blob(batch->labels.data(), {batch->size}, torch::kInt64);
      if (device_.is_cuda()) {
        // Pinned host memory lets the copy run asynchronously with the previous step's kernels.
        x = x.pin_memory().to(device_, /*non_blocking=*/true);
        y = y.to(device_);
      }
      if (options_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
#ifdef DDPRUN_WITH_CUDA
      if (options_.amp) {
        at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
        at::autocast::set_enabled(true);
      }
#endif
      loss = torch::cross_entropy_loss(model_->forward(x), y);
#ifdef DDPRUN_WITH_CUDA
      if (options_.amp) {
        at::autocast::set_enabled(false);
        at::autocast::clear_cache();
      }
#endif
    }
    // A rank whose whole batch failed to decode still takes part in the gradient all-reduce
    // (with zero gradients), so the collectives stay matched.
    const float local_loss = loss.defined() ? loss.item<float>() * batch->size : 0.0f;
    sync_->Begin({local_signal != 0 ? 1.0f : 0.0f, local_loss, static_cast<float>(batch->size),
                  static_cast<float>(batch->errors.size())});
    if (loss.defined()) loss.backward();
    std::vector<float> control;
    DDPRUN_RETURN_IF_ERROR(sync_->Finish(&control));
    optimizer_->step();

    // Positions of the padded global order this step consumed (all ranks take the same count).
    const int64_t consumed = std::min(B, my_count - batch->index * B) * world();
    const float mean_loss = control[kCount] > 0 ? control[kLossSum] / control[kCount] : 0;
    state_.epoch_offset += consumed;
    state_.global_step += 1;
    state_.epoch_loss_sum += mean_loss;
    state_.epoch_loss_steps += 1;
    *samples += static_cast<int64_t>(control[kCount]);
    skipped_images_ += static_cast<int64_t>(control[kSkipped]);
    stop = control[kStop] > 0;
    if (stop && local_signal == 0) peer_stop_ = SIGTERM;
    if (state_.epoch_loss_steps % options_.print_freq == 0 ||
        state_.epoch_loss_steps == steps_per_epoch) {
      const double dt = SecondsSince(t0);
      Log(absl::StrFormat("Epoch: [%d][%d/%d] loss %.4f lr %.5f images/s %.1f", epoch,
                          state_.epoch_loss_steps, steps_per_epoch, mean_loss, lr,
                          dt > 0 ? *samples / dt : 0));
    }
    if (options_.max_steps > 0 && state_.epoch_loss_steps >= options_.max_steps) break;
  }
  *train_s = SecondsSince(t0);
  return stop;
}

absl::Status ImageNetTrainer::Validate(double* acc1, double* acc5, double* loss) {
  DistributedSampler sampler(
      {static_cast<int64_t>(val_.samples.size()), world(), comm_->rank(), false, 0});
  PipelineOptions popt;
  popt.workers = options_.workers;
  popt.batch_size = options_.batch_size;
  popt.transform = {/*train=*/false, options_.image_size};
  InputPipeline pipeline(&val_, sampler.IndicesWithoutPadding(0), popt);
  const int S = options_.image_size;
  const int64_t k = std::min<int64_t>(5, static_cast<int64_t>(train_.classes.size()));
  double loss_sum = 0, top1 = 0, top5 = 0, count = 0, skipped = 0;
  model_->eval();
  {
    torch::NoGradGuard no_grad;
    while (std::optional<ImageBatch> batch = pipeline.Next()) {
      ReportSkipped(*batch);
      skipped += batch->errors.size();
      if (batch->size == 0) continue;
      torch::Tensor x = torch::from_blob(batch->images.data(), {batch->size, 3, S, S}).to(device_);
      torch::Tensor y =
          torch::from_blob(batch->labels.data(), {batch->size}, torch::kInt64).to(device_);
      if (options_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
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

absl::StatusOr<ImageNetOutcome> ImageNetTrainer::Run() {
  const bool cuda = torch::cuda::is_available();
  if (options_.device == "cuda" && !cuda) {
    return absl::FailedPreconditionError(
        "--device=cuda: no CUDA device (or this ddp-train was built without CUDA)");
  }
  if (options_.device == "cuda" || (options_.device == "auto" && cuda)) {
    device_ = torch::Device(
        torch::kCUDA, static_cast<c10::DeviceIndex>(env_.local_rank %
                                                    static_cast<int>(torch::cuda::device_count())));
  }
#ifndef DDPRUN_WITH_CUDA
  if (options_.amp) {
    return absl::InvalidArgumentError("--amp needs a CUDA build of ddp-train (DDPRUN_WITH_CUDA)");
  }
#endif
  if (options_.amp && !device_.is_cuda()) {
    return absl::InvalidArgumentError("--amp (bf16 autocast) needs a CUDA device");
  }
  DDPRUN_ASSIGN_OR_RETURN(CommBackend backend, ParseCommBackend(options_.backend));
  if (backend == CommBackend::kNccl && !device_.is_cuda()) {
    return absl::InvalidArgumentError("--backend=nccl needs --device=cuda");
  }
  if (options_.threads > 0) {
    torch::set_num_threads(options_.threads);
  } else if (env_.omp_num_threads.has_value()) {
    torch::set_num_threads(*env_.omp_num_threads);
  } else if (env_.local_world_size > 1) {
    torch::set_num_threads(1);
  }
  CommOptions comm_options;
  comm_options.backend = backend;
  comm_options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options_.comm_timeout_s * 1000));
  DDPRUN_ASSIGN_OR_RETURN(comm_, ConnectCommunicator(env_, comm_options));

  DDPRUN_RETURN_IF_ERROR(AgreeOnSetup(SetupLocal()));
  torch::manual_seed(options_.seed);
  DDPRUN_ASSIGN_OR_RETURN(model_, MakeResNet(options_.arch, train_.classes.size()));
  model_->to(device_);
  if (options_.channels_last) {
    for (torch::Tensor& p : model_->parameters()) {
      if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  optimizer_ = std::make_unique<torch::optim::SGD>(model_->parameters(),
                                                   torch::optim::SGDOptions(options_.lr)
                                                       .momentum(options_.momentum)
                                                       .weight_decay(options_.weight_decay));
  GradSyncOptions sync_options;
  sync_options.bucket_cap_bytes = options_.bucket_cap_bytes;
  sync_options.control_slots = kNumControls;
  sync_ = std::make_unique<GradientSynchronizer>(model_->parameters(), comm_.get(), sync_options);
  DDPRUN_RETURN_IF_ERROR(ResumeOrBroadcast());
  Log(absl::StrFormat(
      "ddp-train imagenet: arch %s world_size %d backend %s device %s threads %d workers %d "
      "train %d images %d classes val %d images batch %d image_size %d epochs %d restart %d",
      options_.arch, world(), CommBackendName(backend), device_.str(), torch::get_num_threads(),
      options_.workers, train_.samples.size(), train_.classes.size(), val_.samples.size(),
      options_.batch_size, options_.image_size, options_.epochs, env_.restart_count));

  if (options_.evaluate) {
    double acc1 = 0, acc5 = 0, loss = 0;
    DDPRUN_RETURN_IF_ERROR(Validate(&acc1, &acc5, &loss));
    outcome_.best_acc1 = acc1;
    outcome_.global_step = state_.global_step;
    return outcome_;
  }
  bool resumed = state_.global_step > 0;
  if (state_.epoch > options_.epochs) {
    Log(absl::StrFormat("nothing to train: the checkpoint is past epoch %d (--epochs %d)",
                        state_.epoch - 1, options_.epochs));
  }
  while (state_.epoch <= options_.epochs) {
    int64_t samples = 0;
    double train_s = 0;
    DDPRUN_ASSIGN_OR_RETURN(bool stop, TrainEpoch(&samples, &train_s));
    if (stop) {
      outcome_.stop_signal =
          stop_ != nullptr && stop_->received() != 0 ? stop_->received() : peer_stop_;
      Log(absl::StrFormat("stop requested (signal %d): saving a checkpoint and exiting",
                          outcome_.stop_signal));
      absl::Status saved = SaveCheckpoint("stop", false);
      DDPRUN_RETURN_IF_ERROR(comm_->Barrier());
      DDPRUN_RETURN_IF_ERROR(saved);
      outcome_.global_step = state_.global_step;
      return outcome_;
    }
    // DDP broadcasts BatchNorm's running statistics from rank 0 every forward; once per epoch
    // is enough for what reads them (validation and the checkpoint).
    DDPRUN_RETURN_IF_ERROR(
        GradientSynchronizer::BroadcastFromRankZero(model_->buffers(), comm_.get()));
    EpochMetrics m;
    double acc5 = 0;
    if (!val_.samples.empty()) {
      DDPRUN_RETURN_IF_ERROR(Validate(&m.test_acc, &acc5, &m.test_loss));
    }
    const bool best = !val_.samples.empty() && m.test_acc >= state_.best_acc1;
    state_.best_acc1 = std::max(state_.best_acc1, m.test_acc);
    m.epoch = state_.epoch;
    m.world_size = world();
    m.samples = samples;
    m.train_s = train_s;
    m.samples_per_s = train_s > 0 ? samples / train_s : 0;
    m.train_loss =
        state_.epoch_loss_steps > 0 ? state_.epoch_loss_sum / state_.epoch_loss_steps : 0;
    m.wall_s = SecondsSince(start_);
    m.lr = LearningRate(state_.epoch - 1);  // at the epoch's start
    m.global_step = state_.global_step;
    m.resumed = resumed;
    Log(absl::StrFormat(
        "epoch %d images_per_s %.1f train_s %.2f train_loss %.4f acc1 %.4f best_acc1 %.4f "
        "skipped_images %d world_size %d step %d",
        m.epoch, m.samples_per_s, m.train_s, m.train_loss, m.test_acc, state_.best_acc1,
        skipped_images_, m.world_size, m.global_step));
    if (metrics_.is_open()) DDPRUN_RETURN_IF_ERROR(metrics_.Write(m));
    resumed = false;
    state_.epoch += 1;
    state_.epoch_offset = 0;
    state_.epoch_loss_sum = 0;
    state_.epoch_loss_steps = 0;
    if (store_ != nullptr) SaveCheckpoint("end of epoch", best).IgnoreError();
  }
  outcome_.best_acc1 = state_.best_acc1;
  outcome_.global_step = state_.global_step;
  return outcome_;
}

}  // namespace

absl::StatusOr<ImageNetOutcome> RunImageNet(const ImageNetOptions& options, const DistEnv& env,
                                            const StopSignal* stop, std::ostream& log) {
  ImageNetTrainer trainer(options, env, stop, log);
  try {
    return trainer.Run();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(FirstLine(e.what()));
  }
}

}  // namespace ddprun::worker
