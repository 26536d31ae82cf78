// The data a run trains and evaluates on, whatever its kind: an image set (train and test
// splits) or a text corpus (train and validation tokens). The trainer, `pactrain eval` and
// `prune-report` load it by the options' --data and get their batches and their evaluation here.
#pragma once

#include <memory>
#include <optional>

#include "apps/data/dataset.h"
#include "apps/data/image_folder.h"
#include "apps/data/image_folder_loader.h"
#include "apps/data/text.h"
#include "apps/models/registry.h"
#include "comm/process_group.h"
#include "layers/module.h"

namespace pac {

struct TrainOptions;

struct RunData {
  data::Dataset train, test;                // image data held in memory
  std::optional<data::ImageFolder> folder;  // image files (--data imagefolder), read per batch
  std::optional<data::TextCorpus> text;     // text data (--data text or fortunes)
  bool is_text() const { return text.has_value(); }
  bool is_folder() const { return folder.has_value(); }
  std::string name() const;
  // Training samples: images, or characters of text.
  int64_t train_samples() const;
};

// `train`: also the training split (evaluation needs only the test split, but a text corpus
// comes whole).
RunData load_run_data(const TrainOptions& options, bool train = true);

// Fills the data-dependent model fields (0 = from the data: channels, classes and image size, or
// the vocabulary) and checks given ones against it.
models::ModelConfig resolve_model_config(models::ModelConfig config, const RunData& data);

// This rank's training batches, drawn with `options.seed`.
std::unique_ptr<data::BatchSource> make_train_loader(const RunData& data,
                                                     const TrainOptions& options,
                                                     const models::ModelConfig& config, int rank,
                                                     int world, bool pinned);
// An image folder's batches for the training loop (`train`) or an evaluation of `files`.
data::ImageFolderLoaderOptions folder_loader_options(const TrainOptions& options,
                                                     const models::ModelConfig& config, bool train);

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy: per image, or per token (nats)
  double accuracy = 0.0;  // of the label, or of the next token
  int64_t samples = 0;    // images, or tokens
};

// Test loss and accuracy of images in batches of `batch`. With a process group of several ranks,
// each evaluates its share and every rank gets the totals.
EvalResult evaluate(nn::Module& model, const data::Dataset& dataset, int64_t batch,
                    comm::ProcessGroup* group = nullptr);
// Validation loss of a language model over the first `windows` fixed windows of `tokens`
// (apps/data/text.h), shared among the ranks as above.
EvalResult evaluate_text(nn::Module& model, const Tensor& tokens, int64_t context, int64_t windows,
                         int64_t batch, comm::ProcessGroup* group = nullptr);
// The images of an image folder's `files`, with the evaluation transform, shared among the ranks
// as above; `loader_threads` decode ahead of the model.
EvalResult evaluate_files(nn::Module& model, const std::vector<data::ImageFile>& files,
                          const data::ImageFolderLoaderOptions& options, int loader_threads,
                          comm::ProcessGroup* group = nullptr);
// The run's evaluation, in batches of the training batch: the test set, the image folder's val/,
// or `eval_iters` batches of validation windows.
EvalResult evaluate_run(nn::Module& model, const RunData& data, const TrainOptions& options,
                        const models::ModelConfig& config, comm::ProcessGroup* group = nullptr,
                        int loader_threads = 0);

}  // namespace pac
