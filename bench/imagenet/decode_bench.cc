// Decoded images/s of ddp-train's ImageNet input pipeline (read + JPEG decode + transform +
// normalise into a batch), for 1..N decode threads, so "images/s per core" can be compared
// with what the model consumes. Data: an ImageFolder (--data, e.g. real ImageNet), else copies
// of one real photo (--photo, default matplotlib's 512x600 Grace Hopper JPEG, close to
// ImageNet's typical 500x375 / 110 kB files) in a temporary ImageFolder.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/image/image_folder.h"
#include "trainer/image/input_pipeline.h"

namespace fs = std::filesystem;
using ddprun::trainer::ImageFolder;
using ddprun::trainer::InputPipeline;
using ddprun::trainer::PipelineOptions;

int main(int argc, char** argv) {
  CLI::App app{"ddp-train ImageNet input pipeline throughput"};
  std::string data, photo = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg";
  int images = 512, max_threads = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  int size = 224, batch = 64;
  bool val = false;
  app.add_option("--data", data, "an ImageFolder to read (default: copies of --photo)");
  app.add_option("--photo", photo, "the JPEG copied --images times")->capture_default_str();
  app.add_option("--images", images, "images per measurement")->capture_default_str();
  app.add_option("--max-threads", max_threads, "measure 1, 2, 4 .. this many")
      ->capture_default_str();
  app.add_option("--image-size", size, "crop side")->capture_default_str();
  app.add_option("--batch-size", batch, "batch size")->capture_default_str();
  app.add_flag("--val", val, "validation transform (Resize + CenterCrop) instead of training");
  CLI11_PARSE(app, argc, argv);

  std::string tmp;
  if (data.empty()) {
    tmp = absl::StrCat(fs::temp_directory_path().string(), "/decode_bench_", getpid());
    fs::create_directories(tmp + "/photo");
    for (int i = 0; i < images; ++i) {
      fs::copy_file(photo, absl::StrCat(tmp, "/photo/", i, ".jpg"));
    }
    data = tmp;
  }
  absl::StatusOr<ImageFolder> folder = ddprun::trainer::ScanImageFolder(data);
  if (!folder.ok()) {
    std::cerr << folder.status() << "\n";
    return 2;
  }
  const int64_t n = std::min<int64_t>(images, folder->samples.size());
  std::vector<int64_t> indices(n);
  std::iota(indices.begin(), indices.end(), 0);
  std::cout << absl::StrFormat(
      "| decode threads | images/s | images/s per thread |  (%s, %d images, %s %dx%d, batch %d)\n"
      "|---|---|---|\n",
      tmp.empty() ? data : photo, n, val ? "val" : "train", size, size, batch);
  std::vector<int> counts;
  for (int t = 1; t < max_threads; t *= 2) counts.push_back(t);
  counts.push_back(max_threads);
  for (int t : counts) {
    PipelineOptions options;
    options.workers = t;
    options.batch_size = batch;
    options.transform = {!val, size};
    options.seed = 1;
    // One warm-up pass (page cache, allocator), then the measured one.
    for (int pass = 0; pass < 2; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      InputPipeline pipeline(&*folder, indices, options);
      int64_t decoded = 0;
      while (std::optional<ddprun::trainer::ImageBatch> b = pipeline.Next()) decoded += b->size;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (pass == 1) {
        std::cout << absl::StrFormat("| %d | %.0f | %.0f |\n", t, decoded / s, decoded / s / t);
      }
    }
  }
  if (!tmp.empty()) fs::remove_all(tmp);
  return 0;
}
