#include "worker/mnist_trainer.h"

#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "worker/adadelta.h"
#include "worker/checkpoint_broadcast.h"
#include "worker/checkpoint_store.h"
#include "worker/comm.h"
#include "worker/distributed_sampler.h"
#include "worker/grad_sync.h"
#include "worker/metrics.h"
#include "worker/mnist_data.h"
#include "worker/mnist_net.h"
#include "worker/progress.h"
#include "worker/train_state.h"

namespace ddprun::worker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kMnistMean = 0.1307;  // torchvision's Normalize((0.1307,), (0.3081,))
constexpr double kMnistStd = 0.3081;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

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

class MnistTrainer {
 public:
  MnistTrainer(const MnistOptions& options, const DistEnv& env, const StopSignal* stop,
               std::ostream& log)
      : options_(options), env_(env), stop_(stop), log_(log), start_(Clock::now()) {}

  absl::StatusOr<MnistOutcome> Run();

 private:
  bool leader() const { return comm_->rank() == 0; }
  int world() const { return comm_->world_size(); }
  void Log(const std::string& line) {
    if (leader()) log_ << line << std::endl;
  }

  absl::Status SetupLocal();  // data, checkpoint directory; no communication
  absl::Status AgreeOnSetup(const absl::Status& local);
  absl::Status ResumeOrBroadcast();
  absl::Status SaveCheckpoint(const char* why);
  // Trains the rest of the current epoch. True when a stop was requested.
  absl::StatusOr<bool> TrainEpoch(int64_t* samples, double* train_s);
  absl::Status EvaluateAndReport(int64_t samples, double train_s, bool resumed);
  // DDP's invariant, checked once per epoch: every rank holds rank 0's parameters.
  absl::Status CheckReplicasInSync();

  const MnistOptions& options_;
  const DistEnv& env_;
  const StopSignal* stop_;
  std::ostream& log_;
  Clock::time_point start_;

  std::unique_ptr<Communicator> comm_;
  torch::Device device_{torch::kCPU};
  MnistData data_;
  SplitTensors train_, test_;
  MnistNet model_{nullptr};
  std::unique_ptr<Adadelta> optimizer_;
  std::unique_ptr<GradientSynchronizer> sync_;
  std::unique_ptr<CheckpointStore> store_;
  std::unique_ptr<ProgressReporter> progress_;
  MetricsWriter metrics_;
  TrainProgress state_;
  MnistOutcome outcome_;
  int peer_stop_ = 0;
};

absl::Status MnistTrainer::SetupLocal() {
  DDPRUN_ASSIGN_OR_RETURN(data_, LoadMnist(options_.data_dir));
  TruncateSplit(data_.train, options_.train_subset);
  TruncateSplit(data_.test, options_.test_subset);
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
  if (!options_.checkpoint_dir.empty()) {
    store_ = std::make_unique<CheckpointStore>(options_.checkpoint_dir, options_.keep_checkpoints);
    if (leader()) {
      DDPRUN_RETURN_IF_ERROR(
          CheckCheckpointDirectory(store_.get(), options_.checkpoint_dir, options_.resume));
    }
  }
  if (leader() && !options_.metrics_file.empty()) {
    DDPRUN_RETURN_IF_ERROR(metrics_.Open(options_.metrics_file));
  }
  return absl::OkStatus();
}

absl::Status MnistTrainer::AgreeOnSetup(const absl::Status& local) {
  // Every rank learns whether any rank failed, so all stop before training with a clear line
  // instead of the healthy ones hanging in the first collective.
  torch::Tensor failed = torch::tensor({local.ok() ? 0.0f : 1.0f}).to(device_);
  DDPRUN_RETURN_IF_ERROR(comm_->AllReduceSum(failed));
  DDPRUN_RETURN_IF_ERROR(local);
  if (failed.item<float>() > 0) {
    return absl::FailedPreconditionError("another rank failed during setup (see its error)");
  }
  return absl::OkStatus();
}

absl::Status MnistTrainer::ResumeOrBroadcast() {
  DDPRUN_ASSIGN_OR_RETURN(
      std::optional<std::string> payload,
      ReadCheckpointOnAllRanks(store_.get(), options_.resume != ResumeMode::kNever, comm_.get(),
                               device_, log_));
  if (!payload.has_value()) {
    return GradientSynchronizer::BroadcastFromRankZero(model_->parameters(), comm_.get());
  }
  const auto t0 = Clock::now();
  absl::Status s = DeserializeTrainState(*payload, model_, *optimizer_, &state_);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint in ", options_.checkpoint_dir, ": ", s.message()));
  }
  Log(absl::StrFormat(
      "resumed from checkpoint: epoch %d, sample offset %d, step %d (saved by world size %d) "
      "(load %.1f ms)",
      state_.epoch, state_.epoch_offset, state_.global_step, state_.world_size,
      SecondsSince(t0) * 1e3));
  return absl::OkStatus();
}

absl::Status MnistTrainer::SaveCheckpoint(const char* why) {
  if (store_ == nullptr || !leader()) return absl::OkStatus();
  state_.world_size = world();
  const auto t0 = Clock::now();
  DDPRUN_ASSIGN_OR_RETURN(std::string payload, SerializeTrainState(model_, *optimizer_, state_));
  const double serialize_ms = SecondsSince(t0) * 1e3;
  const auto t1 = Clock::now();
  absl::Status s = store_->Save(state_.global_step, payload);
  if (!s.ok()) {
    // The previous checkpoint is untouched; training goes on and the next save tries again.
    log_ << "warning: checkpoint at step " << state_.global_step << " not saved: " << s.message()
         << std::endl;
    return s;
  }
  Log(
      absl::StrFormat("checkpoint: saved step %d (%s, epoch %d offset %d, %.1f MB) serialize "
                      "%.1f ms, write+fsync %.1f ms",
                      state_.global_step, why, state_.epoch, state_.epoch_offset,
                      payload.size() / 1e6, serialize_ms, SecondsSince(t1) * 1e3));
  return absl::OkStatus();
}

absl::StatusOr<bool> MnistTrainer::TrainEpoch(int64_t* samples, double* train_s) {
  const int64_t epoch = state_.epoch;
  optimizer_->set_lr(options_.lr * std::pow(options_.gamma, static_cast<double>(epoch - 1)));
  DistributedSampler sampler(
      {train_.count, world(), comm_->rank(), /*shuffle=*/true, options_.sampler_seed});
  const std::vector<int64_t> indices = sampler.Indices(epoch, state_.epoch_offset);
  const size_t batch = static_cast<size_t>(options_.batch_size);
  const int64_t steps_total =
      state_.epoch_loss_steps + static_cast<int64_t>((indices.size() + batch - 1) / batch);
  model_->train();
  const auto t0 = Clock::now();
  bool stop = false;
  for (size_t begin = 0; begin < indices.size() && !stop; begin += batch) {
    const size_t end = std::min(indices.size(), begin + batch);
    torch::Tensor idx = IndexTensor(indices, begin, end, device_);
    torch::Tensor x = train_.images.index_select(0, idx);
    torch::Tensor y = train_.labels.index_select(0, idx);
    optimizer_->ZeroGrad();
    torch::Tensor loss = torch::nll_loss(model_->forward(x), y);
    const int local_signal = stop_ != nullptr ? stop_->received() : 0;
    sync_->Begin({local_signal != 0 ? 1.0f : 0.0f, loss.item<float>()});
    loss.backward();
    std::vector<float> control;
    DDPRUN_RETURN_IF_ERROR(sync_->Finish(&control));
    optimizer_->Step();

    const int64_t step_samples = static_cast<int64_t>(end - begin) * world();
    state_.epoch_offset += step_samples;
    state_.global_step += 1;
    state_.epoch_loss_sum += control[1] / world();
    state_.epoch_loss_steps += 1;
    *samples += step_samples;
    stop = control[0] > 0;
    if (stop && local_signal == 0) peer_stop_ = SIGTERM;
    if (leader() && progress_ != nullptr) {
      const double dt = SecondsSince(t0);
      progress_->Step(epoch, state_.epoch_loss_steps, steps_total,
                      std::min(state_.epoch_offset, train_.count), train_.count,
                      control[1] / world(), dt > 0 ? *samples / dt : 0);
    }
    if (options_.checkpoint_every > 0 && state_.global_step % options_.checkpoint_every == 0 &&
        !stop) {
      SaveCheckpoint("periodic").IgnoreError();  // logged; the previous one stays valid
    }
    if (options_.dry_run ||
        (options_.max_steps > 0 && state_.epoch_loss_steps >= options_.max_steps)) {
      break;
    }
  }
  *train_s = SecondsSince(t0);
  if (progress_ != nullptr) progress_->EndEpoch();
  return stop;
}

absl::Status MnistTrainer::EvaluateAndReport(int64_t samples, double train_s, bool resumed) {
  DistributedSampler sampler({test_.count, world(), comm_->rank(), /*shuffle=*/false, 0});
  const std::vector<int64_t> indices = sampler.IndicesWithoutPadding(0);
  model_->eval();
  double loss_sum = 0;
  int64_t correct = 0;
  {
    torch::NoGradGuard no_grad;
    const size_t batch = static_cast<size_t>(options_.test_batch_size);
    for (size_t begin = 0; begin < indices.size(); begin += batch) {
      const size_t end = std::min(indices.size(), begin + batch);
      torch::Tensor idx = IndexTensor(indices, begin, end, device_);
      torch::Tensor out = model_->forward(test_.images.index_select(0, idx));
      torch::Tensor y = test_.labels.index_select(0, idx);
      loss_sum += torch::nll_loss(out, y, {}, at::Reduction::Sum).item<double>();
      correct += out.argmax(1).eq(y).sum().item<int64_t>();
    }
  }
  torch::Tensor totals =
      torch::tensor({loss_sum, static_cast<double>(correct), static_cast<double>(indices.size()),
                     static_cast<double>(samples) / world()},
                    torch::kFloat64)
          .to(device_);
  DDPRUN_RETURN_IF_ERROR(comm_->AllReduceSum(totals));
  totals = totals.to(torch::kCPU);
  auto t = totals.accessor<double, 1>();
  EpochMetrics m;
  m.epoch = state_.epoch;
  m.world_size = world();
  m.samples = static_cast<int64_t>(t[3]);
  m.train_s = train_s;
  m.samples_per_s = train_s > 0 ? t[3] / train_s : 0;
  m.train_loss = state_.epoch_loss_steps > 0 ? state_.epoch_loss_sum / state_.epoch_loss_steps : 0;
  m.test_loss = t[2] > 0 ? t[0] / t[2] : 0;
  m.test_acc = t[2] > 0 ? t[1] / t[2] : 0;
  m.wall_s = SecondsSince(start_);
  m.lr = optimizer_->lr();
  m.global_step = state_.global_step;
  m.resumed = resumed;
  outcome_.test_acc = m.test_acc;
  Log(absl::StrFormat(
      "Test set: Average loss: %.4f, Accuracy: %d/%d (%.2f%%)\n"
      "epoch %d samples_per_s %.1f train_s %.2f test_acc %.4f train_loss %.4f world_size %d",
      m.test_loss, static_cast<int64_t>(t[1]), static_cast<int64_t>(t[2]), 100 * m.test_acc,
      m.epoch, m.samples_per_s, m.train_s, m.test_acc, m.train_loss, m.world_size));
  if (metrics_.is_open()) DDPRUN_RETURN_IF_ERROR(metrics_.Write(m));
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
  DDPRUN_ASSIGN_OR_RETURN(CommBackend backend, ParseCommBackend(options_.backend));
  if (backend == CommBackend::kNccl && !device_.is_cuda()) {
    return absl::InvalidArgumentError("--backend=nccl needs --device=cuda");
  }
  if (options_.threads > 0) {
    torch::set_num_threads(options_.threads);
  } else if (env_.omp_num_threads.has_value()) {
    torch::set_num_threads(*env_.omp_num_threads);
  } else if (env_.local_world_size > 1) {
    torch::set_num_threads(1);  // processes share the cores; one thread each is fastest
  }
  CommOptions comm_options;
  comm_options.backend = backend;
  comm_options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options_.comm_timeout_s * 1000));
  DDPRUN_ASSIGN_OR_RETURN(comm_, ConnectCommunicator(env_, comm_options));

  DDPRUN_RETURN_IF_ERROR(AgreeOnSetup(SetupLocal()));
  torch::manual_seed(options_.seed);
  model_ = MnistNet();
  model_->to(device_);
  optimizer_ = std::make_unique<Adadelta>(model_->parameters(), AdadeltaOptions{options_.lr});
  GradSyncOptions sync_options;
  sync_options.bucket_cap_bytes = options_.bucket_cap_bytes;
  sync_ = std::make_unique<GradientSynchronizer>(model_->parameters(), comm_.get(), sync_options);
  DDPRUN_RETURN_IF_ERROR(ResumeOrBroadcast());
  if (leader()) {
    progress_ = std::make_unique<ProgressReporter>(
        log_, options_.progress_bar && isatty(STDOUT_FILENO), options_.log_interval);
  }
  Log(absl::StrFormat(
      "ddp-train mnist: world_size %d rank %d backend %s device %s threads %d train %d test %d "
      "batch %d epochs %d restart %d",
      world(), comm_->rank(), CommBackendName(backend), device_.str(), torch::get_num_threads(),
      train_.count, test_.count, options_.batch_size, options_.epochs, env_.restart_count));

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
      absl::Status saved = SaveCheckpoint("stop");
      // The others wait until rank 0's checkpoint is durable: a launcher that sees one rank
      // exit tears the group down.
      DDPRUN_RETURN_IF_ERROR(comm_->Barrier());
      DDPRUN_RETURN_IF_ERROR(saved);
      outcome_.global_step = state_.global_step;
      return outcome_;
    }
    DDPRUN_RETURN_IF_ERROR(CheckReplicasInSync());
    DDPRUN_RETURN_IF_ERROR(EvaluateAndReport(samples, train_s, resumed));
    resumed = false;
    state_.epoch += 1;
    state_.epoch_offset = 0;
    state_.epoch_loss_sum = 0;
    state_.epoch_loss_steps = 0;
    if (store_ != nullptr) SaveCheckpoint("end of epoch").IgnoreError();
  }
  if (options_.save_model && leader()) {
    try {
      torch::save(model_, options_.save_model_path);
      Log(absl::StrCat("model saved to ", options_.save_model_path));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat(options_.save_model_path, ": ", FirstLine(e.what())));
    }
  }
  outcome_.global_step = state_.global_step;
  return outcome_;
}

}  // namespace

absl::StatusOr<MnistOutcome> RunMnist(const MnistOptions& options, const DistEnv& env,
                                      const StopSignal* stop, std::ostream& log) {
  MnistTrainer trainer(options, env, stop, log);
  try {
    return trainer.Run();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(FirstLine(e.what()));
  }
}

}  // namespace ddprun::worker
