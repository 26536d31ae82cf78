#include "apps/data/image_folder.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "apps/data/image_decode.h"
#include "core/error.h"

namespace pac::data {

namespace {

namespace fs = std::filesystem;

bool hidden(const fs::path& p) { return p.filename().string().starts_with("."); }

// The class folders of one split, sorted by name, as torchvision's find_classes sorts them.
// Hidden folders (.ipynb_checkpoints, .git) are not classes.
std::vector<std::string> class_names(const fs::path& split) {
  std::error_code ec;
  PAC_CHECK(fs::is_directory(split, ec),
            "--data imagefolder: {} is not a folder; expected DIR/train/CLASS/* and "
            "DIR/val/CLASS/* (torchvision's ImageFolder layout)",
            split.string());
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(split)) {
    if (entry.is_directory() && !hidden(entry.path())) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  PAC_CHECK(!names.empty(), "--data imagefolder: {} has no class folders; expected {}/CLASS/*",
            split.string(), split.string());
  return names;
}

// The images of one class folder and its subfolders, sorted by path; other files are counted.
void list_class(const fs::path& folder, int64_t label, ImageFolder& out,
                std::vector<ImageFile>& files) {
  std::vector<std::string> paths;
  for (const auto& entry :
       fs::recursive_directory_iterator(folder, fs::directory_options::follow_directory_symlink)) {
    if (entry.is_directory()) continue;
    const std::string path = entry.path().string();
    if (has_image_extension(path) && !hidden(entry.path())) {
      paths.push_back(path);
    } else {
      if (out.skipped++ == 0) out.first_skipped = path;
    }
  }
  PAC_CHECK(!paths.empty(),
            "--data imagefolder: class folder {} has no images (.jpg, .jpeg or .png); remove "
            "it or add its images",
            folder.string());
  std::sort(paths.begin(), paths.end());
  for (auto& p : paths) files.push_back({std::move(p), label});
}

}  // namespace

ImageFolder scan_image_folder(const std::string& root) {
  std::error_code ec;
  PAC_CHECK(!root.empty(),
            "--data imagefolder needs --data-dir DIR (DIR/train/CLASS/*, "
            "DIR/val/CLASS/*)");
  PAC_CHECK(fs::is_directory(root, ec), "--data imagefolder: --data-dir {} is not a folder", root);
  ImageFolder out;
  out.root = root;
  out.classes = class_names(fs::path(root) / "train");
  const std::vector<std::string> val_classes = class_names(fs::path(root) / "val");
  for (const auto& c : out.classes) {
    PAC_CHECK(std::binary_search(val_classes.begin(), val_classes.end(), c),
              "--data imagefolder: class '{}' is in {}/train but not in {}/val; both splits "
              "need the same class folders",
              c, root, root);
  }
  for (const auto& c : val_classes) {
    PAC_CHECK(std::binary_search(out.classes.begin(), out.classes.end(), c),
              "--data imagefolder: class '{}' is in {}/val but not in {}/train; both splits "
              "need the same class folders",
              c, root, root);
  }
  for (size_t i = 0; i < out.classes.size(); ++i) {
    const int64_t label = static_cast<int64_t>(i);
    list_class(fs::path(root) / "train" / out.classes[i], label, out, out.train);
    list_class(fs::path(root) / "val" / out.classes[i], label, out, out.val);
  }
  return out;
}

}  // namespace pac::data
