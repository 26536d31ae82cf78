// pactrain: the command-line app.
//   pactrain train --config apps/recipes/resnet20-fashion-mnist.toml [--option value ...]
//   pactrain eval --checkpoint run.safetensors
//   pactrain generate --checkpoint gpt.safetensors --prompt "ROMEO:" --tokens 300
//   pactrain summary --model vit-tiny
//   pactrain prune-report --model resnet20 --prune magnitude --sparsity 0.8
// Errors are one line on stderr and a non-zero exit code.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "apps/checkpoint.h"
#include "apps/commands.h"
#include "apps/data/prefetch.h"
#include "apps/generate.h"
#include "apps/prune_report.h"
#include "apps/recipe.h"
#include "apps/trainer.h"
#include "comm/compressor.h"
#include "core/cpu/threads.h"
#include "core/option_reader.h"
#include "prune/criterion.h"

using namespace pac;

int main(int argc, char** argv) {
  CLI::App app{"pactrain: train, evaluate and inspect models"};
  app.require_subcommand(1);

  TrainOptions o;
  o.model.in_channels = o.model.num_classes = o.model.image_size = 0;
  CommandLists train_lists;
  CLI::App* train_cmd = app.add_subcommand("train", "train a model");
  add_train_options(*train_cmd, o, train_lists);
  train_cmd->get_option("--global-batch")->excludes("--batch");
  std::vector<std::string> configs;
  bool print_config = false;
  train_cmd
      ->add_option("--config", configs,
                   "read options from a recipe (apps/recipes/*.toml), or rerun the recipe a "
                   "checkpoint or metrics file recorded; the command line overrides it, and a "
                   "later --config an earlier one")
      ->configurable(false)
      ->group("Output");
  train_cmd->add_flag("--print-config", print_config, "print the resolved recipe as TOML and stop")
      ->configurable(false)
      ->group("Output");

  std::string eval_checkpoint;
  TrainOptions eval_options;
  int64_t eval_batch = 0;
  CLI::App* eval_cmd = app.add_subcommand(
      "eval", "test accuracy of a checkpoint, or the validation loss of a language model");
  eval_cmd->add_option("--checkpoint", eval_checkpoint, "checkpoint to evaluate")->required();
  eval_cmd->add_option("--data", eval_options.data, "data set (text or fortunes for a GPT)")
      ->capture_default_str();
  eval_cmd->add_option("--data-dir", eval_options.data_dir, "folder of the data set");
  eval_cmd->add_option("--text-file", eval_options.text_file, "--data text: the UTF-8 file");
  eval_cmd->add_flag("--coarse-labels", eval_options.coarse_labels,
                     "--data cifar100: its 20 superclasses");
  eval_cmd->add_flag("--skip-corrupt-images", eval_options.skip_corrupt_images,
                     "--data imagefolder: skip images that cannot be decoded");
  eval_cmd
      ->add_option("--batch", eval_batch,
                   "batch size (0: 500 images, 100 of an image folder, 12 windows of text)")
      ->capture_default_str();
  eval_cmd->add_option("--test-subset", eval_options.test_subset, "first N test samples (0: all)");
  eval_cmd->add_option("--eval-iters", eval_options.eval_iters,
                       "text: N batches of validation windows (0: all)");

  GenerateOptions generate_options;
  CLI::App* generate_cmd =
      app.add_subcommand("generate", "continue a prompt with a language model checkpoint");
  generate_cmd->add_option("--checkpoint", generate_options.checkpoint, "a GPT checkpoint")
      ->required();
  generate_cmd->add_option("--prompt", generate_options.prompt, "text to continue")
      ->capture_default_str();
  generate_cmd->add_option("--tokens", generate_options.tokens, "characters to generate")
      ->capture_default_str();
  generate_cmd
      ->add_option("--temperature", generate_options.temperature,
                   "divides the logits: below 1 is more conservative")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  generate_cmd
      ->add_option("--top-k", generate_options.top_k, "sample among the k likeliest (0: all)")
      ->capture_default_str();
  generate_cmd->add_option("--seed", generate_options.seed, "random seed")->capture_default_str();

  models::ModelConfig summary_config;
  summary_config.in_channels = 3;
  summary_config.num_classes = 10;
  summary_config.image_size = 32;
  CLI::App* summary_cmd = app.add_subcommand("summary", "print a model's layers and parameters");
  add_model_options(*summary_cmd, summary_config, false);

  PruneReportOptions report;
  report.train.model.in_channels = report.train.model.num_classes = 0;
  report.train.model.image_size = 0;
  CLI::App* report_cmd = app.add_subcommand(
      "prune-report",
      "prune a model (or a checkpoint) in one event to --sparsity, as --prune-schedule "
      "oneshot:0, and print density, FLOPs and bytes per step");
  CommandLists report_lists;
  add_model_options(*report_cmd, report.train.model, true);
  add_prune_options(*report_cmd, report.train, report_lists);
  report_cmd->add_option("--checkpoint", report.checkpoint, "start from this checkpoint");
  report_cmd->add_option("--data", report.train.data, "data set (a batch for gradient criteria)")
      ->capture_default_str();
  report_cmd->add_option("--data-dir", report.train.data_dir, "folder of the data set");
  report_cmd->add_option("--text-file", report.train.text_file, "--data text: the UTF-8 file");
  report_cmd->add_option("--world", report.world, "ranks, for the bytes on the wire")
      ->capture_default_str();
  report_cmd
      ->add_option("--bucket-mb", report.train.bucket_mb, "gradient bucket size (MB on the wire)")
      ->capture_default_str();
  report_cmd
      ->add_option("--first-bucket-mb", report.train.first_bucket_mb,
                   "first bucket (MB on the wire)")
      ->capture_default_str();
  report_cmd->add_option("--compress-opt", report_lists.compress_options,
                         "pactrain option, e.g. enc=ternary, for the bytes column");
  report_cmd->add_option("--seed", report.train.seed, "random seed")->capture_default_str();

  for (CLI::App* cmd : {train_cmd, eval_cmd, generate_cmd, summary_cmd, report_cmd})
    add_range_checks(*cmd);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*train_cmd) {
      RecipeTables from_recipe;
      if (!configs.empty()) from_recipe = apply_recipes(*train_cmd, read_recipes(configs));
      o.compress_options = merge_key_values("--compress-opt", from_recipe.compress_options,
                                            train_lists.compress_options);
      o.prune_options =
          merge_key_values("--prune-opt", from_recipe.prune_options, train_lists.prune_options);
      o.decay_1d = !train_lists.no_decay_1d;
      o.recipe = recipe_text(
          *train_cmd, {key_value_pairs(o.compress_options), key_value_pairs(o.prune_options)});
      if (print_config) {
        std::fputs(o.recipe.c_str(), stdout);
        return 0;
      }
      train(o);
    } else if (*report_cmd) {
      report.train.compress_options =
          merge_key_values("--compress-opt", {}, report_lists.compress_options);
      report.train.prune_options = merge_key_values("--prune-opt", {}, report_lists.prune_options);
      for (const auto& [key, value] : report.train.compress_options) {
        PAC_CHECK(key == "enc" || key == "levels",
                  "prune-report: --compress-opt {} is not used; only enc= and levels=", key);
      }
      comm::make_compressor("pactrain", report.train.compress_options);  // checks the values
      std::fputs(run_prune_report(report).c_str(), stdout);
    } else if (*eval_cmd) {
      models::ModelConfig config = read_checkpoint_config(eval_checkpoint);
      nn::ModulePtr model = models::make_model(config);
      load_checkpoint(eval_checkpoint, config, *model, nullptr);
      eval_options.model = config;
      RunData data = load_run_data(eval_options, false);
      config = resolve_model_config(config, data);  // the data must fit the model
      if (data.is_folder()) {
        eval_options.batch = eval_batch ? eval_batch : 100;
        EvalResult r = evaluate_run(*model, data, eval_options, config, nullptr,
                                    data::default_loader_threads(cpu::num_threads(), 1));
        std::printf("%s on %s/val: %ld images, loss %.4f, accuracy %.2f%%\n", config.name.c_str(),
                    data.name().c_str(), static_cast<long>(r.samples), r.loss, 100.0 * r.accuracy);
      } else if (data.is_text()) {
        eval_options.batch = eval_batch ? eval_batch : 12;
        EvalResult r = evaluate_run(*model, data, eval_options, config);
        std::printf(
            "%s on %s: %ld validation tokens, loss %.4f nats per token (%.4f bits), next-token "
            "accuracy %.2f%%\n",
            config.name.c_str(), data.name().c_str(), static_cast<long>(r.samples), r.loss,
            r.loss / std::log(2.0), 100.0 * r.accuracy);
      } else {
        EvalResult r = evaluate(*model, data.test, eval_batch ? eval_batch : 500);
        std::printf("%s on %s: %ld samples, loss %.4f, accuracy %.2f%%\n", config.name.c_str(),
                    data.name().c_str(), static_cast<long>(r.samples), r.loss, 100.0 * r.accuracy);
      }
    } else if (*generate_cmd) {
      std::fputs(generate_from_checkpoint(generate_options).c_str(), stdout);
      std::fputs("\n", stdout);
    } else if (*summary_cmd) {
      nn::ModulePtr model = models::make_model(summary_config);
      std::fputs(model->summary(models::example_input_shape(summary_config)).c_str(), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pactrain: %s\n", e.what());
    return 1;
  }
  return 0;
}
