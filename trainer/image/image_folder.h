// torchvision.datasets.ImageFolder's layout: <root>/<class>/<image>, one sub-folder per class,
// class names sorted (byte order, as Python sorts them) and numbered from 0.
//
// Only JPEG and PNG are decoded, recognised by extension (.jpg .jpeg .png, any case). A file
// with such an extension whose first bytes are not a JPEG / PNG signature is skipped and counted
// with a warning (reading 8 bytes per file costs little next to decoding it later); files with
// other extensions are skipped and counted too. Decode failures that only show later (a
// truncated JPEG) are the input pipeline's to count.
#ifndef DDPRUN_TRAINER_IMAGE_IMAGE_FOLDER_H_
#define DDPRUN_TRAINER_IMAGE_IMAGE_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ddprun::trainer {

enum class ImageFormat { kJpeg, kPng };

struct ImageSample {
  std::string path;
  int64_t label = 0;
  ImageFormat format = ImageFormat::kJpeg;
};

struct ImageFolder {
  std::string root;
  std::vector<std::string> classes;   // index = label
  std::vector<ImageSample> samples;   // sorted by class, then file name
  int64_t skipped = 0;                // non-image or corrupt files left out
  std::vector<std::string> warnings;  // one line per skipped file (capped), then a summary
};

// Scans a training folder. kNotFound / kPermissionDenied / kInvalidArgument naming the
// directory when it cannot be read or holds no class folder; kInvalidArgument naming every
// class folder without a usable image.
absl::StatusOr<ImageFolder> ScanImageFolder(const std::string& root);

// Scans a validation folder whose labels must be those of `train_classes`: kInvalidArgument
// naming every class the training set lacks. Classes of the training set missing here are
// fine (a smaller validation set).
absl::StatusOr<ImageFolder> ScanValidationFolder(const std::string& root,
                                                 const std::vector<std::string>& train_classes);

}  // namespace ddprun::trainer

#endif  // DDPRUN_TRAINER_IMAGE_IMAGE_FOLDER_H_
