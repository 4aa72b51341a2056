#include "trainer/image/image_folder.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ddprun::trainer {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxFileWarnings = 20;  // the summary line counts the rest

absl::Status DirError(const std::string& what, const std::string& path, std::error_code ec) {
  const std::string msg = absl::StrCat(what, " ", path, ": ", ec.message());
  if (ec == std::errc::permission_denied) return absl::PermissionDeniedError(msg);
  if (ec == std::errc::no_such_file_or_directory) return absl::NotFoundError(msg);
  return absl::InvalidArgumentError(msg);
}

// Sorted entry names of `dir` that are (or are not) directories.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir, bool dirs) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return DirError("cannot read image directory", dir, ec);
  std::vector<std::string> names;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    const bool is_dir = it->is_directory(type_ec);  // follows symlinks, like torchvision
    if (is_dir == dirs) names.push_back(it->path().filename().string());
  }
  if (ec) return DirError("cannot read image directory", dir, ec);
  std::sort(names.begin(), names.end());
  return names;
}

bool FormatFromExtension(const std::string& name, ImageFormat* format) {
  const std::string ext = absl::AsciiStrToLower(fs::path(name).extension().string());
  if (ext == ".jpg" || ext == ".jpeg") {
    *format = ImageFormat::kJpeg;
    return true;
  }
  if (ext == ".png") {
    *format = ImageFormat::kPng;
    return true;
  }
  return false;
}

// Empty when the file starts with the signature of `format`, else why not.
std::string CheckSignature(const std::string& path, ImageFormat format) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::StrCat("cannot open: ", std::strerror(errno));
  unsigned char head[8] = {};
  in.read(reinterpret_cast<char*>(head), sizeof(head));
  const std::streamsize n = in.gcount();
  if (format == ImageFormat::kJpeg) {
    if (n >= 3 && head[0] == 0xFF && head[1] == 0xD8 && head[2] == 0xFF) return "";
    return "not a JPEG file (no JPEG signature)";
  }
  static constexpr unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (n == 8 && std::memcmp(head, kPng, 8) == 0) return "";
  return "not a PNG file (no PNG signature)";
}

// Scans `root`, mapping class folder names through `label_of` (nullptr: number them in order).
absl::StatusOr<ImageFolder> Scan(const std::string& root,
                                 const std::map<std::string, int64_t>* label_of) {
  ImageFolder folder;
  folder.root = root;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    if (!fs::exists(root, ec)) {
      return absl::NotFoundError(absl::StrCat("image directory ", root, " does not exist"));
    }
    return absl::InvalidArgumentError(absl::StrCat(root, " is not a directory"));
  }
  absl::StatusOr<std::vector<std::string>> classes = ListDir(root, /*dirs=*/true);
  if (!classes.ok()) return classes.status();
  if (classes->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image directory ", root, " has no class sub-folders (expected <root>/<class>/<image>)"));
  }
  if (label_of != nullptr) {
    std::vector<std::string> unknown;
    for (const std::string& c : *classes) {
      if (label_of->count(c) == 0) unknown.push_back(c);
    }
    if (!unknown.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("validation directory ", root, " has ", unknown.size(),
                       " class(es) the training set lacks: ", absl::StrJoin(unknown, ", ")));
    }
  }
  folder.classes = *classes;
  std::vector<std::string> empty;
  for (size_t c = 0; c < classes->size(); ++c) {
    const std::string dir = absl::StrCat(root, "/", (*classes)[c]);
    absl::StatusOr<std::vector<std::string>> files = ListDir(dir, /*dirs=*/false);
    if (!files.ok()) return files.status();
    const int64_t label = label_of != nullptr ? label_of->at((*classes)[c]) : c;
    size_t found = 0;
    for (const std::string& name : *files) {
      const std::string path = absl::StrCat(dir, "/", name);
      ImageFormat format = ImageFormat::kJpeg;  // set by FormatFromExtension when it matters
      std::string why;
      if (!FormatFromExtension(name, &format)) {
        why = "not a .jpg, .jpeg or .png file";
      } else {
        why = CheckSignature(path, format);
      }
      if (!why.empty()) {
        if (folder.skipped < kMaxFileWarnings) {
          folder.warnings.push_back(absl::StrCat("skipped ", path, ": ", why));
        }
        ++folder.skipped;
        continue;
      }
      folder.samples.push_back({path, label, format});
      ++found;
    }
    if (found == 0) empty.push_back((*classes)[c]);
  }
  if (!empty.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("image directory ", root, ": ", empty.size(),
                     " class folder(s) without a JPEG or PNG image: ", absl::StrJoin(empty, ", ")));
  }
  if (folder.skipped > 0) {
    folder.warnings.push_back(absl::StrCat(root, ": skipped ", folder.skipped,
                                           " non-image or corrupt file(s); using ",
                                           folder.samples.size(), " images"));
  }
  return folder;
}

}  // namespace

absl::StatusOr<ImageFolder> ScanImageFolder(const std::string& root) { return Scan(root, nullptr); }

absl::StatusOr<ImageFolder> ScanValidationFolder(const std::string& root,
                                                 const std::vector<std::string>& train_classes) {
  std::map<std::string, int64_t> label_of;
  for (size_t i = 0; i < train_classes.size(); ++i) label_of[train_classes[i]] = i;
  absl::StatusOr<ImageFolder> folder = Scan(root, &label_of);
  if (folder.ok()) folder->classes = train_classes;
  return folder;
}

}  // namespace ddprun::trainer
