// pactrain: the command-line app.
//   pactrain train --model resnet20 --data fashion-mnist --epochs 10 ...
//   pactrain eval --checkpoint run.safetensors
//   pactrain generate --checkpoint gpt.safetensors --prompt "ROMEO:" --tokens 300
//   pactrain summary --model vit-tiny
//   pactrain prune-report --model resnet20 --prune magnitude --sparsity 0.8
// Errors are one line on stderr and a non-zero exit code.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "apps/checkpoint.h"
#include "apps/generate.h"
#include "apps/prune_report.h"
#include "apps/trainer.h"
#include "comm/compressor.h"
#include "core/cpu/threads.h"
#include "core/option_reader.h"
#include "prune/criterion.h"

using namespace pac;

namespace {

void add_model_options(CLI::App* cmd, models::ModelConfig& m, bool data_dependent) {
  cmd->add_option("--model", m.name,
                  "model: " + fmt::format("{}", fmt::join(models::model_names(), ", ")))
      ->capture_default_str();
  std::string from_data = data_dependent ? " (0: from the data)" : "";
  cmd->add_option("--in-channels", m.in_channels, "input channels" + from_data)
      ->capture_default_str();
  cmd->add_option("--num-classes", m.num_classes, "output classes" + from_data)
      ->capture_default_str();
  cmd->add_option("--image-size", m.image_size, "image height and width" + from_data)
      ->capture_default_str();
  cmd->add_flag("--small-input", m.small_input,
                "ResNet-18/34/50: 3x3 stride-1 stem without max-pool, for small images");
  cmd->add_option("--patch", m.patch, "ViT patch size")->capture_default_str();
  cmd->add_option("--dim", m.dim, "ViT or GPT width (0: the preset's)")->capture_default_str();
  cmd->add_option("--depth", m.depth, "ViT or GPT blocks (0: the preset's)")->capture_default_str();
  cmd->add_option("--heads", m.heads, "ViT or GPT attention heads (0: the preset's)")
      ->capture_default_str();
  cmd->add_option("--mlp-dim", m.mlp_dim, "ViT MLP width (0: the preset's)")->capture_default_str();
  cmd->add_option("--dropout", m.dropout, "ViT or GPT dropout")->capture_default_str();
  cmd->add_option("--context", m.context, "GPT context in tokens (0: the preset's)")
      ->capture_default_str();
  cmd->add_option("--vocab-size", m.vocab_size, "GPT vocabulary" + from_data)
      ->capture_default_str();
}

void add_prune_options(CLI::App* cmd, TrainOptions& o) {
  cmd->add_option(
      "--prune", o.prune,
      "pruning criterion: " + fmt::format("{}", fmt::join(prune::criterion_names(), ", ")) +
          " (default: no pruning)");
  cmd->add_option("--sparsity", o.sparsity, "final fraction of the prunable weights pruned")
      ->capture_default_str();
  cmd->add_option("--prune-scope", o.prune_scope,
                  "layer (every tensor to the sparsity) or global (one ranking); default: the "
                  "criterion's (global for one that needs it, else layer)")
      ->check(CLI::IsMember({"layer", "global"}));
  cmd->add_option_function<std::vector<std::string>>(
         "--prune-opt",
         [&o](const std::vector<std::string>& pairs) {
           for (const auto& kv : pairs) {
             auto eq = kv.find('=');
             o.prune_options[kv.substr(0, eq)] = kv.substr(eq + 1);
           }
         },
         "criterion option key=value (repeatable), e.g. rounds=100 for synflow")
      ->check(CLI::Validator(
          [](std::string& kv) {
            auto eq = kv.find('=');
            return eq != std::string::npos && eq > 0 ? std::string()
                                                     : "'" + kv + "' must be key=value";
          },
          "KEY=VALUE"));
  cmd->add_option("--prune-exclude", o.prune_exclude,
                  "never prune parameters matching this glob, e.g. 'conv1.*' (repeatable)");
}

// Numeric ranges, checked while parsing, so that a bad value is refused with what is allowed
// before anything runs. Options a subcommand does not have are skipped.
void add_range_checks(CLI::App* cmd) {
  auto range = [](bool (*ok)(double), const std::string& allowed) {
    return CLI::Validator(
        [ok, allowed](std::string& text) -> std::string {
          const std::optional<double> v = parse_number(text);
          if (v && ok(*v)) return "";
          return "must be " + allowed + ", got " + text;
        },
        allowed);
  };
  const CLI::Validator positive = range([](double v) { return v > 0.0; }, "> 0");
  const CLI::Validator non_negative = range([](double v) { return v >= 0.0; }, ">= 0");
  const CLI::Validator fraction =
      range([](double v) { return v >= 0.0 && v < 1.0; }, "at least 0 and below 1");
  for (const char* name : {"--epochs", "--batch", "--synthetic-size", "--bucket-mb",
                           "--first-bucket-mb", "--patch", "--world"}) {
    if (auto* o = cmd->get_option_no_throw(name)) o->check(positive);
  }
  for (const char* name :
       {"--max-steps",    "--lr",          "--comm-timeout", "--momentum",   "--weight-decay",
        "--warmup",       "--clip-grad",   "--crop-padding", "--threads",    "--checkpoint-every",
        "--train-subset", "--test-subset", "--dim",          "--depth",      "--heads",
        "--mlp-dim",      "--in-channels", "--num-classes",  "--image-size", "--context",
        "--vocab-size",   "--eval-every",  "--eval-iters",   "--tokens",     "--top-k"}) {
    if (auto* o = cmd->get_option_no_throw(name)) o->check(non_negative);
  }
  for (const char* name : {"--sparsity", "--label-smoothing", "--dropout", "--beta1", "--beta2"}) {
    if (auto* o = cmd->get_option_no_throw(name)) o->check(fraction);
  }
}

// key=value pairs of --compress-opt into the options map.
void parse_compress_options(const std::vector<std::string>& pairs, TrainOptions& o) {
  for (const auto& kv : pairs) {
    auto eq = kv.find('=');
    PAC_CHECK(eq != std::string::npos && eq > 0, "--compress-opt '{}' must be key=value", kv);
    o.compress_options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pactrain: train, evaluate and inspect models"};
  app.require_subcommand(1);

  TrainOptions o;
  o.model.in_channels = o.model.num_classes = o.model.image_size = 0;
  CLI::App* train_cmd = app.add_subcommand("train", "train a model");
  add_model_options(train_cmd, o.model, true);
  train_cmd
      ->add_option("--data", o.data,
                   "fashion-mnist, mnist, cifar10, synthetic, text (--text-file) or fortunes")
      ->capture_default_str();
  train_cmd->add_option("--text-file", o.text_file,
                        "--data text: a UTF-8 file; one token per character, 90% for training");
  train_cmd->add_option("--eval-every", o.eval_every, "also evaluate every N steps (0: per epoch)")
      ->capture_default_str();
  train_cmd
      ->add_option("--eval-iters", o.eval_iters,
                   "text: evaluate on N batches of validation windows (0: all)")
      ->capture_default_str();
  train_cmd->add_option("--data-dir", o.data_dir,
                        "folder of the data set (default: its usual one)");
  train_cmd
      ->add_option("--train-subset", o.train_subset, "use the first N training samples (0: all)")
      ->capture_default_str();
  train_cmd->add_option("--test-subset", o.test_subset, "evaluate on the first N test samples")
      ->capture_default_str();
  train_cmd->add_option("--synthetic-size", o.synthetic_size, "samples of --data synthetic")
      ->capture_default_str();
  train_cmd->add_option("--epochs", o.epochs, "epochs")->capture_default_str();
  train_cmd->add_option("--max-steps", o.max_steps, "stop after N steps in all (0: no limit)")
      ->capture_default_str();
  train_cmd->add_option("--batch", o.batch, "batch size per process")->capture_default_str();
  train_cmd->add_option("--lr", o.lr, "(peak) learning rate")->capture_default_str();
  train_cmd->add_option("--optimizer", o.optimizer, "sgd or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  train_cmd->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  train_cmd->add_flag("--nesterov", o.nesterov, "SGD with Nesterov momentum");
  train_cmd->add_option("--weight-decay", o.weight_decay, "weight decay")->capture_default_str();
  train_cmd->add_option("--beta1", o.beta1, "AdamW's first-moment decay")->capture_default_str();
  train_cmd->add_option("--beta2", o.beta2, "AdamW's second-moment decay")->capture_default_str();
  train_cmd->add_flag("--no-decay-1d{false}", o.decay_1d,
                      "AdamW: no weight decay on biases and norms (1-D parameters), as nanoGPT");
  train_cmd
      ->add_option("--schedule", o.schedule,
                   "constant, cosine, cosine:MIN_LR, onecycle, step:EVERY:GAMMA, "
                   "multistep:M1,M2:GAMMA")
      ->capture_default_str();
  train_cmd->add_option("--warmup", o.warmup, "linear warm-up steps")->capture_default_str();
  train_cmd->add_option("--label-smoothing", o.label_smoothing, "label smoothing")
      ->capture_default_str();
  train_cmd->add_option("--clip-grad", o.clip_grad, "clip the gradient norm (0: off)")
      ->capture_default_str();
  train_cmd->add_option("--crop-padding", o.crop_padding, "random crop after padding (0: off)")
      ->capture_default_str();
  train_cmd->add_flag("--flip", o.flip, "random horizontal flips");
  train_cmd->add_option("--device", o.device, "where to train: cpu, cuda or cuda:N")
      ->capture_default_str();
  train_cmd->add_flag("--tf32", o.tf32,
                      "GPU: let fp32 matrix products and convolutions use TF32 tensor cores");
  train_cmd
      ->add_option("--backend", o.backend,
                   "auto (under mpirun: nccl for --device cuda, else mpi; local otherwise), "
                   "local, mpi, nccl")
      ->check(CLI::IsMember({"auto", "local", "mpi", "nccl"}))
      ->capture_default_str();
  train_cmd
      ->add_option(
          "--compress", o.compress,
          "gradient compressor: " + fmt::format("{}", fmt::join(comm::compressor_names(), ", ")))
      ->capture_default_str();
  std::vector<std::string> compress_opts;
  train_cmd->add_option("--compress-opt", compress_opts,
                        "compressor option key=value (repeatable)");
  train_cmd->add_option("--bucket-mb", o.bucket_mb, "gradient bucket size (MB on the wire)")
      ->capture_default_str();
  train_cmd
      ->add_option("--first-bucket-mb", o.first_bucket_mb,
                   "first (small) bucket size (MB on the wire)")
      ->capture_default_str();
  train_cmd->add_flag("--allow-unused-parameters", o.allow_unused_parameters,
                      "data parallel: reduce parameters that got no gradient as zeros");
  train_cmd
      ->add_option("--comm-timeout", o.comm_timeout,
                   "seconds a collective may wait before the peers are taken for dead (0: forever)")
      ->capture_default_str();
  train_cmd->add_flag("--skip-nonfinite", o.skip_nonfinite,
                      "skip a step whose loss or gradient is NaN or Inf (default: stop)");
  train_cmd
      ->add_option("--sync", o.sync,
                   "step (all-reduce every step's gradients), local:H (average the parameters "
                   "every H steps), diloco:H (an outer Nesterov step on the averaged "
                   "pseudo-gradient every H steps) or diloco:H:fragments=F[:mix=A] (streaming: "
                   "one of F fragments every H/F steps, its all-reduce overlapped with the next "
                   "steps); the compressor carries what is averaged")
      ->capture_default_str();
  train_cmd->add_option("--sync-warmup", o.sync_warmup, "synchronous steps before local ones")
      ->capture_default_str();
  train_cmd
      ->add_option("--outer-lr", o.outer_lr,
                   "diloco: the outer learning rate (DiLoCo's 0.7 and momentum 0.9 suit "
                   "AdamW inside; with SGD and momentum inside, 1 and 0.5 trained better: "
                   "docs/local-sgd.md)")
      ->capture_default_str();
  train_cmd->add_option("--outer-momentum", o.outer_momentum, "diloco: the outer Nesterov momentum")
      ->capture_default_str();
  train_cmd->add_option("--recalibrate-bn", o.recalibrate_bn,
                        "re-estimate batch-norm statistics on N training batches before each "
                        "evaluation (default: 20 with --sync diloco, else 0)");
  add_prune_options(train_cmd, o);
  train_cmd
      ->add_option("--prune-schedule", o.prune_schedule,
                   "oneshot:STEP, gradual:T0:T1:DT[:S0] or imp:ROUNDS:EPOCHS_PER_ROUND")
      ->capture_default_str();
  train_cmd->add_option("--seed", o.seed, "random seed")->capture_default_str();
  train_cmd->add_option("--threads", o.threads, "CPU threads (0: every core)")
      ->capture_default_str();
  train_cmd->add_option("--metrics", o.metrics, "write JSON-lines metrics to this file");
  train_cmd->add_option("--checkpoint", o.checkpoint, "write a checkpoint here at the end");
  train_cmd
      ->add_option("--checkpoint-every", o.checkpoint_every,
                   "and every N steps (0: only at the end)")
      ->capture_default_str();
  train_cmd->add_option("--resume", o.resume, "continue from this checkpoint");
  train_cmd->add_option("--log-every", o.log_every, "steps between metrics records")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  train_cmd->add_flag("--quiet", o.quiet, "print nothing but errors");
  train_cmd->add_flag("--memory-report", o.memory_report,
                      "at the end, print the memory each purpose (weights, gradients, "
                      "optimizer state, pruning, ...) held at its peak and at the process's");

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
  eval_cmd->add_option("--batch", eval_batch, "batch size (0: 500 images, 12 windows of text)")
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
  add_model_options(summary_cmd, summary_config, false);

  PruneReportOptions report;
  report.train.model.in_channels = report.train.model.num_classes = 0;
  report.train.model.image_size = 0;
  CLI::App* report_cmd = app.add_subcommand(
      "prune-report",
      "prune a model (or a checkpoint) in one event to --sparsity, as --prune-schedule "
      "oneshot:0, and print density, FLOPs and bytes per step");
  add_model_options(report_cmd, report.train.model, true);
  add_prune_options(report_cmd, report.train);
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
  std::vector<std::string> report_compress_opts;
  report_cmd->add_option("--compress-opt", report_compress_opts,
                         "pactrain option, e.g. enc=ternary, for the bytes column");
  report_cmd->add_option("--seed", report.train.seed, "random seed")->capture_default_str();

  for (CLI::App* cmd : {train_cmd, eval_cmd, generate_cmd, summary_cmd, report_cmd})
    add_range_checks(cmd);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*train_cmd) {
      parse_compress_options(compress_opts, o);
      train(o);
    } else if (*report_cmd) {
      parse_compress_options(report_compress_opts, report.train);
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
      resolve_model_config(config, data);  // the data must fit the model
      if (data.is_text()) {
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
