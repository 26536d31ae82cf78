#include "apps/run_data.h"

#include <cmath>

#include "apps/data/loader.h"
#include "apps/data/prefetch.h"
#include "apps/train_step.h"
#include "apps/trainer.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace pac {

namespace {

data::Dataset load_images(const TrainOptions& o, bool train) {
  data::Dataset d;
  if (o.data == "fashion-mnist" || o.data == "mnist") {
    std::string dir = o.data_dir.empty() ? "/usr/share/datasets/" + o.data : o.data_dir;
    d = data::load_mnist_like(o.data, dir, train);
  } else if (o.data == "cifar10") {
    d = data::load_cifar10(o.data_dir.empty() ? "data/cifar-10-batches-bin" : o.data_dir, train);
  } else if (o.data == "cifar100") {
    d = data::load_cifar100(o.data_dir.empty() ? "data/cifar-100-binary" : o.data_dir, train,
                            o.coarse_labels);
  } else if (o.data == "synthetic") {
    int64_t channels = o.model.in_channels ? o.model.in_channels : 3;
    int64_t size = o.model.image_size ? o.model.image_size : 28;
    int64_t classes = o.model.num_classes ? o.model.num_classes : 10;
    d = data::make_synthetic(train ? o.synthetic_size : std::max<int64_t>(o.synthetic_size / 4, 1),
                             channels, size, classes, o.seed * 2 + (train ? 0 : 1));
  } else {
    PAC_FAIL(
        "--data '{}' is not known; expected fashion-mnist, mnist, cifar10, cifar100, "
        "imagefolder, synthetic, text or fortunes",
        o.data);
  }
  PAC_CHECK(!o.coarse_labels || o.data == "cifar100",
            "--coarse-labels picks CIFAR-100's 20 superclasses; --data {} has none", o.data);
  int64_t subset = train ? o.train_subset : o.test_subset;
  if (subset > 0 && subset < d.size()) {
    d.images = d.images.view_flat(0, {subset, d.channels(), d.height(), d.width()});
    d.labels = d.labels.view_flat(0, {subset});
  }
  return d;
}

// An image folder fixes the channels (RGB) and the classes; the image size is the transforms'
// (224 unless --image-size says), the normalisation ImageNet's unless given.
models::ModelConfig resolve_folder_config(models::ModelConfig c, const data::ImageFolder& f) {
  const int64_t classes = static_cast<int64_t>(f.classes.size());
  PAC_CHECK(c.in_channels == 0 || c.in_channels == 3,
            "--in-channels {} does not match the data: an image folder's images are RGB (3)",
            c.in_channels);
  if (!c.classes.empty() && c.classes != f.classes) {
    size_t i = 0;
    while (i < c.classes.size() && i < f.classes.size() && c.classes[i] == f.classes[i]) ++i;
    PAC_FAIL(
        "the model's {} classes are not {}'s {}: class {} is '{}' for the model and '{}' in the "
        "folder; a classifier only reads the classes it was trained on, in their order",
        c.classes.size(), f.root, f.classes.size(), i,
        i < c.classes.size() ? c.classes[i] : "(none)",
        i < f.classes.size() ? f.classes[i] : "(none)");
  }
  PAC_CHECK(c.num_classes == 0 || c.num_classes == classes,
            "--num-classes {} does not match the data: {} has {} class folders", c.num_classes,
            f.root, classes);
  c.in_channels = 3;
  c.num_classes = classes;
  c.classes = f.classes;
  if (c.image_size == 0) c.image_size = 224;
  const data::Normalisation imagenet;
  if (c.normalize_mean.empty()) c.normalize_mean.assign(imagenet.mean.begin(), imagenet.mean.end());
  if (c.normalize_std.empty()) c.normalize_std.assign(imagenet.std.begin(), imagenet.std.end());
  PAC_CHECK(c.normalize_mean.size() == 3 && c.normalize_std.size() == 3,
            "--normalize-mean and --normalize-std take 3 values each (R G B), got {} and {}",
            c.normalize_mean.size(), c.normalize_std.size());
  for (float v : c.normalize_std) {
    PAC_CHECK(v > 0.0f, "--normalize-std {} is not positive", v);
  }
  return c;
}

// Scores `count` batches (batch_at(i) gives batch i) in evaluation mode without gradients: the
// summed loss and the correct predictions of the last dimension's argmax, summed over the ranks.
template <class BatchAt>
EvalResult score_batches(nn::Module& model, int64_t count, BatchAt batch_at,
                         comm::ProcessGroup* group) {
  const Device device = model.parameters().front()->data().device();
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  // loss, correct, samples: f64 so that one all-reduce sums them exactly
  Tensor sums = Tensor::zeros({3}, DType::f64);
  double* totals = sums.data<double>();
  for (int64_t i = 0; i < count; ++i) {
    const data::Batch batch = batch_at(i);
    Tensor logits = model(batch.inputs.to(device));
    const int64_t n = batch.targets.numel();
    totals[0] += batch_loss(logits, batch.targets.to(device)).item() * static_cast<double>(n);
    Tensor predicted = argmax(logits, logits.dim() - 1).cpu();
    const int64_t* p = predicted.data<int64_t>();
    const int64_t* t = batch.targets.data<int64_t>();
    for (int64_t j = 0; j < n; ++j) totals[1] += p[j] == t[j];
    totals[2] += static_cast<double>(n);
  }
  model.train(was_training);
  if (group && group->size() > 1) group->all_reduce(sums, comm::ReduceOp::sum)->wait();
  EvalResult r;
  r.samples = std::llround(totals[2]);
  r.loss = r.samples ? totals[0] / totals[2] : 0.0;
  r.accuracy = r.samples ? totals[1] / totals[2] : 0.0;
  return r;
}

}  // namespace

std::string RunData::name() const {
  if (is_text()) return text->name;
  return is_folder() ? folder->root : train.name;
}

int64_t RunData::train_samples() const {
  if (is_text()) return text->train.numel();
  return is_folder() ? static_cast<int64_t>(folder->train.size()) : train.size();
}

RunData load_run_data(const TrainOptions& o, bool train) {
  RunData d;
  if (o.data == "imagefolder") {
    PAC_CHECK(o.text_file.empty() && !o.coarse_labels && o.eval_iters == 0,
              "--text-file, --coarse-labels and --eval-iters do not apply to --data imagefolder");
    PAC_CHECK(o.train_subset == 0 && o.test_subset == 0,
              "--train-subset and --test-subset apply to the in-memory data sets; for a smaller "
              "image folder, make one (a folder of links to some of the files will do)");
    PAC_CHECK(o.crop_padding == 0,
              "--crop-padding applies to the in-memory data sets; --data imagefolder trains with "
              "torchvision's RandomResizedCrop and horizontal flip");
    d.folder = data::scan_image_folder(o.data_dir);
    return d;
  }
  PAC_CHECK(!o.skip_corrupt_images, "--skip-corrupt-images applies to --data imagefolder");
  if (o.data == "text" || o.data == "fortunes") {
    PAC_CHECK(o.data == "fortunes" || !o.text_file.empty(),
              "--data text needs --text-file PATH (any UTF-8 text file)");
    PAC_CHECK(o.data == "text" || o.text_file.empty(), "--text-file needs --data text");
    PAC_CHECK(o.train_subset == 0 && o.test_subset == 0 && o.crop_padding == 0 && !o.flip,
              "--train-subset, --test-subset, --crop-padding and --flip apply to images; text "
              "runs use --max-steps and --eval-iters");
    d.text = o.data == "text" ? data::load_text_file(o.text_file)
                              : data::load_fortunes(o.data_dir.empty() ? "/usr/share/games/fortunes"
                                                                       : o.data_dir);
    return d;
  }
  PAC_CHECK(o.text_file.empty(), "--text-file needs --data text");
  PAC_CHECK(o.eval_iters == 0,
            "--eval-iters applies to text; an image run evaluates the whole test set "
            "(--test-subset N for fewer)");
  if (train) d.train = load_images(o, true);
  d.test = load_images(o, false);
  return d;
}

models::ModelConfig resolve_model_config(models::ModelConfig c, const RunData& data) {
  const bool gpt = models::is_gpt(c.name);
  if (data.is_text()) {
    PAC_CHECK(gpt,
              "--model {} takes images; text data ({}) needs a language model: gpt, "
              "gpt-nano, gpt-mini or gpt2-small",
              c.name, data.name());
    const data::CharVocab& vocab = data.text->vocab;
    PAC_CHECK(c.vocab.empty() || c.vocab == vocab.chars(),
              "the model's vocabulary ({} characters) is not the one of {} ({} characters); a "
              "character-level model reads only text of its own characters",
              data::CharVocab(c.vocab).size(), data.name(), vocab.size());
    PAC_CHECK(c.vocab_size == 0 || c.vocab_size == vocab.size(),
              "--vocab-size {} does not match the data: {} has {} distinct characters",
              c.vocab_size, data.name(), vocab.size());
    c.vocab_size = vocab.size();
    c.vocab = vocab.chars();
    c.context = models::example_input_shape(c)[1];
    return c;
  }
  PAC_CHECK(!gpt,
            "--model {} is a language model; it trains on text (--data text --text-file "
            "PATH, or --data fortunes), not on {}",
            c.name, data.name());
  if (data.is_folder()) return resolve_folder_config(c, *data.folder);
  PAC_CHECK(c.normalize_mean.empty() && c.normalize_std.empty(),
            "--normalize-mean and --normalize-std apply to --data imagefolder; {} is normalised "
            "by its own statistics",
            data.name());
  const data::Dataset& d = data.test;
  auto resolve = [&](int64_t& field, int64_t from_data, const char* option) {
    PAC_CHECK(field == 0 || field == from_data, "{} {} does not match the data: {} has {}", option,
              field, d.name, from_data);
    field = from_data;
  };
  resolve(c.in_channels, d.channels(), "--in-channels");
  resolve(c.num_classes, d.num_classes, "--num-classes");
  PAC_CHECK(d.height() == d.width(), "{}: images are {}x{}; only square images are supported",
            d.name, d.height(), d.width());
  resolve(c.image_size, d.height(), "--image-size");
  return c;
}

std::unique_ptr<data::BatchSource> make_train_loader(const RunData& data, const TrainOptions& o,
                                                     const models::ModelConfig& config, int rank,
                                                     int world, bool pinned) {
  if (data.is_text()) {
    return std::make_unique<data::TextLoader>(
        data.text->train, data::TextLoaderOptions{o.batch, config.context, o.seed, rank, world});
  }
  if (data.is_folder()) {
    data::ImageFolderLoaderOptions options = folder_loader_options(o, config, true);
    options.rank = rank, options.world_size = world, options.pinned = pinned;
    return std::make_unique<data::ImageFolderLoader>(data.folder->train, options);
  }
  return std::make_unique<data::Loader>(
      data.train, data::LoaderOptions{o.batch, true, o.seed, rank, world, true, o.crop_padding,
                                      o.flip, pinned});
}

data::ImageFolderLoaderOptions folder_loader_options(const TrainOptions& o,
                                                     const models::ModelConfig& config,
                                                     bool train) {
  data::ImageFolderLoaderOptions options;
  options.batch = o.batch;
  options.train = train;
  options.seed = o.seed;
  options.image_size = config.image_size;
  for (int c = 0; c < 3; ++c) {
    options.normalisation.mean[c] = config.normalize_mean.at(c);
    options.normalisation.std[c] = config.normalize_std.at(c);
  }
  options.skip_corrupt = o.skip_corrupt_images;
  return options;
}

EvalResult evaluate(nn::Module& model, const data::Dataset& dataset, int64_t batch,
                    comm::ProcessGroup* group) {
  // With a group, rank r takes the contiguous r-th share of the samples; the sums are all-reduced.
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  int64_t begin = dataset.size() * rank / world, end = dataset.size() * (rank + 1) / world;
  data::Dataset share = dataset;
  share.images = dataset.images.view_flat(
      begin * dataset.channels() * dataset.height() * dataset.width(),
      {end - begin, dataset.channels(), dataset.height(), dataset.width()});
  share.labels = dataset.labels.view_flat(begin, {end - begin});
  data::Loader loader(share, {batch, false, 0, 0, 1, false});
  return score_batches(
      model, loader.num_batches(), [&](int64_t b) { return loader.batch(b); }, group);
}

EvalResult evaluate_files(nn::Module& model, const std::vector<data::ImageFile>& files,
                          const data::ImageFolderLoaderOptions& options, int loader_threads,
                          comm::ProcessGroup* group) {
  // Rank r takes the contiguous r-th share of the files, in order.
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const size_t n = files.size();
  const size_t begin = n * rank / world, end = n * (rank + 1) / world;
  if (begin == end) {  // more ranks than files: this rank only joins the sums
    return score_batches(
        model, 0, [](int64_t) { return data::Batch{}; }, group);
  }
  data::ImageFolderLoaderOptions share = options;
  share.train = false, share.rank = 0, share.world_size = 1;
  data::Prefetcher loader(
      std::make_unique<data::ImageFolderLoader>(
          std::vector<data::ImageFile>(files.begin() + begin, files.begin() + end), share),
      loader_threads, 2);
  return score_batches(
      model, loader.num_batches(), [&](int64_t b) { return loader.batch(b); }, group);
}

EvalResult evaluate_text(nn::Module& model, const Tensor& tokens, int64_t context, int64_t windows,
                         int64_t batch, comm::ProcessGroup* group) {
  // Rank r takes the contiguous r-th share of the windows.
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const int64_t begin = windows * rank / world, end = windows * (rank + 1) / world;
  return score_batches(
      model, (end - begin + batch - 1) / batch,
      [&](int64_t i) {
        const int64_t first = begin + i * batch;
        return data::window_batch(tokens, context, first, std::min(batch, end - first));
      },
      group);
}

EvalResult evaluate_run(nn::Module& model, const RunData& data, const TrainOptions& o,
                        const models::ModelConfig& config, comm::ProcessGroup* group,
                        int loader_threads) {
  // In batches of the training batch, as torchvision's and nanoGPT's scripts evaluate: the same
  // shapes as the training step's forward, so evaluation reuses its memory and never holds more.
  if (data.is_folder()) {
    return evaluate_files(model, data.folder->val, folder_loader_options(o, config, false),
                          loader_threads, group);
  }
  if (!data.is_text()) return evaluate(model, data.test, o.batch, group);
  const int64_t windows = data::validation_windows(data.text->val, config.context,
                                                   o.eval_iters > 0 ? o.eval_iters * o.batch : 0);
  return evaluate_text(model, data.text->val, config.context, windows, o.batch, group);
}

}  // namespace pac
