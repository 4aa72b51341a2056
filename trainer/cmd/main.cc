// ddp-train: the bundled LibTorch worker. `ddp-train mnist --data DIR [...]`,
// `ddp-train imagenet --data DIR [--val-path DIR] [...]`.
//
// Exit codes:
//   0        training finished
//   1        runtime failure (communication with peers lost or timed out, I/O, LibTorch error)
//   2        usage or input error (bad flag, missing/corrupt data file, unusable checkpoint
//            directory, checkpoint of another model or shape); retrying cannot help
//   128+N    stopped by signal N (SIGTERM 143, SIGINT 130, SIGUSR1 138) after the current step,
//            with a checkpoint saved when --checkpoint-dir is set; a rank stopped because a
//            peer was signalled exits 143; with in-process recovery also while waiting for a
//            round (then the last round's rank 0 saves its own state)
// On 1 and 2 the error is also written to TORCHELASTIC_ERROR_FILE (torch's @record format).
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/version.h"
#include "trainer/io/commit_guard.h"
#include "trainer/io/dist_env.h"
#include "trainer/io/error_file.h"
#include "trainer/io/fault_injection.h"
#include "trainer/io/mnist_data.h"
#include "trainer/io/preload_handover.h"
#include "trainer/io/stop_signal.h"
#include "trainer/train/imagenet_options.h"
#include "trainer/train/imagenet_trainer.h"
#include "trainer/train/mnist_options.h"
#include "trainer/train/mnist_trainer.h"
#include "trainer/train/train_options.h"

namespace ddprun::trainer {
namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

bool IsInputError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kPermissionDenied:
      return true;
    default:
      return false;
  }
}

int Fail(const DistEnv& env, const absl::Status& s) {
  if (IsLeaseExpired(s)) {
    // Not a failure of this worker: its node lost the rendezvous' trust (docs/design.md,
    // "Fencing"). No error file: ddprun knows why.
    std::cerr << "ddp-train: rank " << env.rank << ": " << s.message() << "; exiting "
              << kExitLeaseExpired << std::endl;
    return kExitLeaseExpired;
  }
  const bool input = IsInputError(s);
  const std::string msg(s.message());
  std::cerr << "ddp-train: rank " << env.rank << ": error: " << msg << std::endl;
  absl::Status written =
      WriteErrorFile(env.error_file, input ? "InputError" : "RuntimeError", msg,
                     absl::StrCat("ddp-train (C++) rank ", env.rank, ": ", s.ToString()));
  if (!written.ok()) std::cerr << "ddp-train: " << written.message() << std::endl;
  return input ? kExitUsage : kExitRuntime;
}

// A stop signal that ended a wait for a round before the first one was joined (in-process
// recovery, trainer_rounds.cc) exits as a stop; nothing to save yet.
int FailOrStop(const DistEnv& env, const absl::Status& s, const StopSignal& stop) {
  if (absl::IsCancelled(s) && stop.received() != 0) {
    std::cerr << "ddp-train: rank " << env.rank << ": " << s.message() << std::endl;
    return 128 + stop.received();
  }
  return Fail(env, s);
}

// The flags every subcommand has, declared once; `data_help` says what --data holds.
void AddCommonFlags(CLI::App* cmd, const std::string& data_help, TrainOptions* o) {
  cmd->add_option("--data", o->data_dir, data_help)->required();
  cmd->add_option("--batch-size", o->batch_size, "input batch size per process")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--epochs", o->epochs, "number of epochs")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate (imagenet: the peak of its schedule)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", o->seed,
                  "random seed: model init, dropout (mnist), sampler order and augmentation "
                  "(imagenet)")
      ->capture_default_str();
  cmd->add_option("--log-interval,--print-freq,-p", o->log_interval, "steps between progress lines")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--max-steps", o->max_steps, "at most N steps per epoch (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir,--checkpoints-path", o->checkpoint_dir,
                  "directory for checkpoints (created; must be writable); imagenet keeps the "
                  "best model in its best/ folder");
  cmd->add_option("--checkpoint-every", o->checkpoint_every,
                  "also checkpoint every N optimizer steps (0: end of epoch only); auto: as "
                  "often as ddprun's checkpoint advice says (DDPRUN_CHECKPOINT_INTERVAL_ADVICE, "
                  "then its updates; every 5 s of training before any)")
      ->transform([o](std::string value) {
        if (value != "auto") return value;
        o->checkpoint_auto = true;
        return std::string("0");
      })
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--keep-checkpoints", o->keep_checkpoints, "checkpoints kept")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  auto* resume = cmd->add_flag_callback(
      "--resume", [o] { o->resume = ResumeMode::kAlways; },
      "require resuming from the newest valid checkpoint (default: resume when the directory "
      "holds one)");
  cmd->add_flag_callback(
         "--no-resume", [o] { o->resume = ResumeMode::kNever; },
         "start fresh; refuse a directory with checkpoints")
      ->excludes(resume);
  cmd->add_option("--metrics-file", o->metrics_file, "append one JSON line per epoch");
  cmd->add_option("--backend", o->backend, "gloo, nccl or auto")
      ->check(CLI::IsMember({"gloo", "nccl", "auto"}))
      ->capture_default_str();
  cmd->add_option("--device", o->device,
                  "cpu, cuda or auto (cuda:LOCAL_RANK in CUDA builds with a GPU, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmd->add_option("--comm-timeout", o->comm_timeout_s, "seconds for store and collectives")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--threads", o->threads,
                  "intra-op threads (0: OMP_NUM_THREADS, else 1 with several local processes)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_flag("--deterministic", o->deterministic,
                "the same bits on a GPU run after run and across a resume (cuDNN's "
                "deterministic algorithms, no autotuning); slower");
  cmd->add_option("--bucket-cap-bytes", o->bucket_cap_bytes, "gradient bucket size")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30))
      ->capture_default_str();
  // Hidden (group ""): a test hook for launchers' hang detection, not a training option.
  cmd->add_option_function<std::string>(
         "--fault",
         [o](const std::string& text) {
           absl::StatusOr<HangFault> fault = ParseFault(text);
           if (!fault.ok()) throw CLI::ValidationError(std::string(fault.status().message()));
           o->fault = *fault;
         },
         "hang@STEP:RANK: rank RANK hangs after step STEP (first attempt only)")
      ->group("");
}

void AddMnistFlags(CLI::App* cmd, MnistOptions* o) {
  AddCommonFlags(cmd,
                 "directory with train-images-idx3-ubyte[.gz] etc. (also raw/, "
                 "FashionMNIST/raw/, MNIST/raw/)",
                 o);
  cmd->add_option("--test-batch-size", o->test_batch_size, "test batch size per process")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--gamma", o->gamma, "learning rate step gamma (per epoch)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--sampler-seed", o->sampler_seed,
                  "DistributedSampler seed; epoch e shuffles with seed+e")
      ->capture_default_str();
  cmd->add_flag("--dry-run", o->dry_run, "one step per epoch");
  cmd->add_flag("--save-model", o->save_model, "rank 0 saves the final model");
  cmd->add_option("--save-model-path", o->save_model_path, "where --save-model writes")
      ->capture_default_str();
  cmd->add_option("--train-subset", o->train_subset, "use the first N training images (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--test-subset", o->test_subset, "use the first N test images (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("!--no-progress-bar", o->progress_bar, "plain progress lines even on a terminal");
}

void AddImageNetFlags(CLI::App* cmd, ImageNetOptions* o) {
  AddCommonFlags(cmd, "training ImageFolder: <dir>/<class>/<image.jpg|png>", o);
  cmd->add_option("--val-path", o->val_dir, "validation ImageFolder (none: no validation)");
  cmd->add_option("--arch", o->arch, "model")
      ->check(CLI::IsMember({"resnet18", "resnet50"}))
      ->capture_default_str();
  cmd->add_option("--momentum", o->momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--weight-decay,--wd", o->weight_decay, "SGD weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--lr-schedule", o->lr_schedule, "step (x0.1 every --lr-step-epochs) or cosine")
      ->check(CLI::IsMember({"step", "cosine"}))
      ->capture_default_str();
  cmd->add_option("--lr-step-epochs", o->lr_step_epochs, "epochs between x0.1 steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--warmup-epochs", o->warmup_epochs, "linear warm-up (fractions allowed)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--workers,-j", o->workers, "decoding threads per process")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--image-size", o->image_size,
                  "crop side (validation resizes to size*256/224 first)")
      ->check(CLI::Range(16, 4096))
      ->capture_default_str();
  cmd->add_flag("--evaluate,-e", o->evaluate, "validate the (resumed) model once and exit");
  cmd->add_flag("--amp", o->amp, "bf16 autocast (CUDA builds, CUDA device)");
  cmd->add_flag("--channels-last", o->channels_last, "NHWC memory format");
}

int Main(int argc, char** argv) {
  // Before anything starts a thread: every thread inherits the blocked stop signals.
  StopSignal stop;

  CLI::App app{"ddp-train: data-parallel LibTorch training (run under ddprun or torchrun)"};
  app.require_subcommand(1);
  // The torch it was built for: a LibTorch build runs only against that torch's libraries
  // (the ddprun_train wheel refuses another one before it starts this binary).
  app.set_version_flag(
      "--version", absl::StrCat("ddp-train ", kVersion, " (built for torch ", TORCH_VERSION, ")"));
  MnistOptions options;
  CLI::App* mnist = app.add_subcommand("mnist", "the classic MNIST CNN on MNIST-format data");
  AddMnistFlags(mnist, &options);
  ImageNetOptions imagenet_options;
  CLI::App* imagenet =
      app.add_subcommand("imagenet", "ResNet-18/50 on ImageFolder data (JPEG, PNG)");
  AddImageNetFlags(imagenet, &imagenet_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (app.exit(e) == 0) return 0;  // --help
    const char* error_file = std::getenv("TORCHELASTIC_ERROR_FILE");
    WriteErrorFile(error_file != nullptr ? error_file : "", "UsageError", e.what(),
                   "ddp-train (C++): command line")
        .IgnoreError();
    return kExitUsage;
  }
  // A ddprun --preload=native spare becomes a worker here; until then its environment is the
  // node's, not a worker's, so nothing above reads a variable that differs between starts.
  std::optional<MnistData> preloaded;
  absl::Status spare = BecomeWorkerIfSpare([&]() -> absl::Status {
    if (!mnist->parsed()) return absl::OkStatus();  // imagenet reads its images as it trains
    absl::StatusOr<MnistData> data = LoadMnist(options.data_dir);
    if (!data.ok()) return data.status();
    preloaded = *std::move(data);
    return absl::OkStatus();
  });
  if (!spare.ok()) return Fail(DistEnv(), spare);
  absl::StatusOr<DistEnv> env = ReadDistEnv(ProcessEnv());
  if (!env.ok()) return Fail(DistEnv(), env.status());
  if (imagenet->parsed()) {
    absl::StatusOr<ImageNetOutcome> outcome = RunImageNet(imagenet_options, *env, &stop, std::cout);
    if (!outcome.ok()) return FailOrStop(*env, outcome.status(), stop);
    return outcome->stop_signal != 0 ? 128 + outcome->stop_signal : 0;
  }
  absl::StatusOr<MnistOutcome> outcome =
      RunMnist(options, *env, &stop, std::cout, std::move(preloaded));
  if (!outcome.ok()) return FailOrStop(*env, outcome.status(), stop);
  if (outcome->stop_signal != 0) return 128 + outcome->stop_signal;
  return 0;
}

}  // namespace
}  // namespace ddprun::trainer

int main(int argc, char** argv) { return ddprun::trainer::Main(argc, argv); }
