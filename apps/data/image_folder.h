// An image data set in torchvision's ImageFolder layout, listed: DIR/train/CLASS/... and
// DIR/val/CLASS/..., one folder per class, the classes in sorted order (their index is the
// label), the files of a class in sorted order. Only the list is held; the loader
// (apps/data/image_folder_loader.h) reads and decodes the files a batch needs.
#pragma once

#include <string>
#include <vector>

namespace pac::data {

struct ImageFile {
  std::string path;
  int64_t label = 0;
};

struct ImageFolder {
  std::string root;
  std::vector<std::string> classes;  // sorted; classes[label]
  std::vector<ImageFile> train, val;
  // Files skipped because their names are not JPEG's or PNG's (.txt, .DS_Store, ...), and the
  // first of them, for the one line that reports them.
  int64_t skipped = 0;
  std::string first_skipped;
};

// Lists `root`. Errors name what is wrong: a missing train/ or val/ folder, a class folder with
// no images, a class that train/ has and val/ lacks or the other way round.
ImageFolder scan_image_folder(const std::string& root);

}  // namespace pac::data
