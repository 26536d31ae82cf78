#include "apps/commands.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "comm/compressor.h"
#include "core/option_reader.h"
#include "prune/criterion.h"

namespace pac {

namespace {

// "pactrain: enc, ef, ...; topk: ratio, ...": the keys each component reads, from its own reader.
template <typename Make>
std::string keys_by_name(const std::vector<std::string>& names, Make make) {
  std::vector<std::string> parts;
  for (const auto& name : names) {
    std::vector<std::string> keys = option_keys([&](const OptionMap& none) { make(name, none); });
    if (!keys.empty()) parts.push_back(fmt::format("{}: {}", name, fmt::join(keys, ", ")));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

CLI::Validator key_value_check() {
  return CLI::Validator(
      [](std::string& kv) {
        auto eq = kv.find('=');
        return eq != std::string::npos && eq > 0 ? std::string() : "'" + kv + "' must be key=value";
      },
      "KEY=VALUE");
}

}  // namespace

void add_model_options(CLI::App& cmd, models::ModelConfig& m, bool data_dependent) {
  const std::string group = "Model";
  std::string from_data = data_dependent ? " (0: from the data)" : "";
  auto add = [&](const std::string& name, auto& value, const std::string& help) {
    cmd.add_option(name, value, help)->capture_default_str()->group(group);
  };
  add("--model", m.name, "model: " + fmt::format("{}", fmt::join(models::model_names(), ", ")));
  add("--in-channels", m.in_channels, "input channels" + from_data);
  add("--num-classes", m.num_classes, "output classes" + from_data);
  add("--image-size", m.image_size, "image height and width" + from_data);
  cmd.add_flag("--small-input", m.small_input,
               "ResNet-18/34/50: 3x3 stride-1 stem without max-pool, for small images")
      ->group(group);
  add("--patch", m.patch, "ViT patch size");
  add("--dim", m.dim, "ViT or GPT width (0: the preset's)");
  add("--depth", m.depth, "ViT or GPT blocks (0: the preset's)");
  add("--heads", m.heads, "ViT or GPT attention heads (0: the preset's)");
  add("--mlp-dim", m.mlp_dim, "ViT MLP width (0: the preset's)");
  add("--dropout", m.dropout, "ViT or GPT dropout");
  add("--context", m.context, "GPT context in tokens (0: the preset's)");
  add("--vocab-size", m.vocab_size, "GPT vocabulary" + from_data);
}

void add_prune_options(CLI::App& cmd, TrainOptions& o, CommandLists& lists) {
  const std::string group = "Pruning";
  cmd.add_option(
         "--prune", o.prune,
         "pruning criterion: " + fmt::format("{}", fmt::join(prune::criterion_names(), ", ")) +
             " (default: no pruning)")
      ->group(group);
  cmd.add_option("--sparsity", o.sparsity, "final fraction of the prunable weights pruned")
      ->capture_default_str()
      ->group(group);
  cmd.add_option("--prune-scope", o.prune_scope,
                 "layer (every tensor to the sparsity) or global (one ranking); default: the "
                 "criterion's (global for one that needs it, else layer)")
      ->check(CLI::IsMember({"layer", "global"}))
      ->group(group);
  cmd.add_option("--prune-opt", lists.prune_options,
                 "criterion option key=value (repeatable); keys: " +
                     keys_by_name(prune::criterion_names(),
                                  [](const std::string& name, const OptionMap& options) {
                                    prune::make_criterion(name, options);
                                  }))
      ->check(key_value_check())
      ->group(group);
  cmd.add_option("--prune-exclude", o.prune_exclude,
                 "never prune parameters matching this glob, e.g. 'conv1.*' (repeatable)")
      ->group(group);
}

void add_train_options(CLI::App& cmd, TrainOptions& o, CommandLists& lists) {
  add_model_options(cmd, o.model, true);
  std::string group;
  auto add = [&](const std::string& name, auto& value, const std::string& help) {
    return cmd.add_option(name, value, help)->capture_default_str()->group(group);
  };
  auto flag = [&](const std::string& name, bool& value, const std::string& help) {
    return cmd.add_flag(name, value, help)->group(group);
  };

  group = "Data";
  add("--data", o.data,
      "fashion-mnist, mnist, cifar10, cifar100, imagefolder (--data-dir), synthetic, text "
      "(--text-file) or fortunes");
  flag("--coarse-labels", o.coarse_labels,
       "--data cifar100: its 20 superclasses instead of its 100 classes");
  add("--text-file", o.text_file,
      "--data text: a UTF-8 file; one token per character, 90% for training");
  add("--data-dir", o.data_dir,
      "folder of the data set (default: its usual one); --data imagefolder: DIR with "
      "DIR/train/CLASS/* and DIR/val/CLASS/*");
  // No default written down: unset, the folder's model takes ImageNet's (a recipe omits them).
  cmd.add_option("--normalize-mean", o.model.normalize_mean,
                 "--data imagefolder: R G B means on the [0, 1] scale (default: ImageNet's "
                 "0.485 0.456 0.406)")
      ->expected(3)
      ->group(group);
  cmd.add_option("--normalize-std", o.model.normalize_std,
                 "--data imagefolder: R G B standard deviations (default: ImageNet's 0.229 "
                 "0.224 0.225)")
      ->expected(3)
      ->group(group);
  flag("--skip-corrupt-images", o.skip_corrupt_images,
       "--data imagefolder: skip and count images that cannot be decoded (default: an error "
       "naming the file)");
  add("--train-subset", o.train_subset, "use the first N training samples (0: all)");
  add("--test-subset", o.test_subset, "evaluate on the first N test samples (0: all)");
  add("--synthetic-size", o.synthetic_size, "samples of --data synthetic");
  add("--loader-threads", o.loader_threads,
      "threads making the next batches while a step runs (-1: the cores --threads leaves to this "
      "rank, at most 4; 0: none, each batch made when the step asks)")
      ->check(CLI::Range(-1, 64));
  add("--crop-padding", o.crop_padding, "random crop after padding (0: off)");
  flag("--flip", o.flip,
       "random horizontal flips (an image folder always flips, as torchvision's ImageNet "
       "training does)");
  add("--eval-every", o.eval_every, "also evaluate every N steps (0: per epoch)");
  add("--eval-iters", o.eval_iters, "text: evaluate on N batches of validation windows (0: all)");

  group = "Optimisation";
  add("--epochs", o.epochs, "epochs");
  add("--max-steps", o.max_steps, "stop after N steps in all (0: no limit)");
  add("--batch", o.batch,
      "batch size per rank: the global batch is --batch x ranks (2 ranks with --batch 64 take "
      "128 samples a step, so an epoch has half the steps)");
  add("--global-batch", o.global_batch,
      "the batch of all ranks together (0: --batch x ranks); each rank takes global / ranks, so "
      "the same recipe makes the same steps on any number of ranks");
  add("--lr", o.lr, "(peak) learning rate");
  add("--optimizer", o.optimizer, "sgd or adamw")->check(CLI::IsMember({"sgd", "adamw"}));
  add("--momentum", o.momentum, "SGD momentum");
  flag("--nesterov", o.nesterov, "SGD with Nesterov momentum");
  add("--weight-decay", o.weight_decay, "weight decay");
  add("--beta1", o.beta1, "AdamW's first-moment decay");
  add("--beta2", o.beta2, "AdamW's second-moment decay");
  flag("--no-decay-1d", lists.no_decay_1d,
       "AdamW: no weight decay on biases and norms (1-D parameters), as nanoGPT");
  add("--schedule", o.schedule,
      "constant, cosine, cosine:MIN_LR, onecycle, step:EVERY:GAMMA, multistep:M1,M2:GAMMA "
      "(EVERY and M in steps, or epochs as 30ep)");
  add("--warmup", o.warmup, "linear warm-up steps");
  add("--label-smoothing", o.label_smoothing, "label smoothing");
  add("--clip-grad", o.clip_grad, "clip the gradient norm (0: off)");
  add("--seed", o.seed, "random seed");

  group = "Device";
  add("--device", o.device, "where to train: cpu, cuda or cuda:N");
  flag("--tf32", o.tf32, "GPU: let fp32 matrix products and convolutions use TF32 tensor cores");
  add("--precision", o.precision,
      "fp32, or bf16 / fp16 mixed precision as torch.autocast: matrix products and convolutions "
      "in the low precision with fp32 sums, everything else and the weights in fp32; fp16 with "
      "dynamic loss scaling (CPU reference path; no GPU kernels yet)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  add("--loss-scale", o.loss_scale,
      "--precision fp16: the initial loss scale (halved after a step whose gradients overflow)");
  add("--loss-scale-growth-interval", o.loss_scale_growth_interval,
      "--precision fp16: finite steps in a row after which the loss scale doubles");
  add("--threads", o.threads, "CPU threads (0: every core)");

  group = "Data parallel (mpirun -np N pactrain train ...)";
  add("--backend", o.backend,
      "auto (under mpirun: nccl for --device cuda, else mpi; local otherwise), local, mpi, nccl")
      ->check(CLI::IsMember({"auto", "local", "mpi", "nccl"}));
  add("--compress", o.compress,
      "gradient compressor: " + fmt::format("{}", fmt::join(comm::compressor_names(), ", ")));
  cmd.add_option("--compress-opt", lists.compress_options,
                 "compressor option key=value (repeatable); keys: " +
                     keys_by_name(comm::compressor_names(),
                                  [](const std::string& name, const OptionMap& options) {
                                    comm::make_compressor(name, options);
                                  }))
      ->check(key_value_check())
      ->group(group);
  add("--bucket-mb", o.bucket_mb, "gradient bucket size (MB on the wire)");
  add("--first-bucket-mb", o.first_bucket_mb, "first (small) bucket size (MB on the wire)");
  add("--packed-wire", o.packed_wire,
      "how packed codes (ternary, terngrad) travel between MPI ranks: coded (Rice codes where "
      "they are shorter) or fields; the sums that arrive are the same")
      ->check(CLI::IsMember({"coded", "fields"}));
  flag("--allow-unused-parameters", o.allow_unused_parameters,
       "reduce parameters that got no gradient as zeros");
  add("--comm-timeout", o.comm_timeout,
      "seconds a collective may wait before the peers are taken for dead (0: forever)");
  flag("--skip-nonfinite", o.skip_nonfinite,
       "skip a step whose loss or gradient is NaN or Inf (default: stop)");
  add("--sync", o.sync,
      "step (all-reduce every step's gradients), local:H (average the parameters every H "
      "steps), diloco:H (an outer Nesterov step on the averaged pseudo-gradient every H steps) "
      "or diloco:H:fragments=F[:mix=A] (streaming: one of F fragments every H/F steps, its "
      "all-reduce overlapped with the next steps); the compressor carries what is averaged");
  add("--sync-warmup", o.sync_warmup, "synchronous steps before local ones");
  add("--outer-lr", o.outer_lr,
      "diloco: the outer learning rate (DiLoCo's 0.7 and momentum 0.9 suit AdamW inside; with "
      "SGD and momentum inside, 1 and 0.5 trained better: docs/local-sgd.md)");
  add("--outer-momentum", o.outer_momentum, "diloco: the outer Nesterov momentum");
  cmd.add_option("--recalibrate-bn", o.recalibrate_bn,
                 "re-estimate batch-norm statistics on N training batches before each "
                 "evaluation (default: 20 with --sync diloco, else 0)")
      ->group(group);

  add_prune_options(cmd, o, lists);
  group = "Pruning";
  add("--prune-schedule", o.prune_schedule,
      "oneshot:STEP, gradual:T0:T1:DT[:S0] or imp:ROUNDS:EPOCHS_PER_ROUND");

  group = "Output";
  cmd.add_option("--metrics", o.metrics, "write JSON-lines metrics to this file")->group(group);
  cmd.add_option("--checkpoint", o.checkpoint, "write a checkpoint here at the end")->group(group);
  add("--checkpoint-every", o.checkpoint_every, "and every N steps (0: only at the end)");
  cmd.add_option("--resume", o.resume,
                 "continue from this checkpoint (on any number of ranks, with its global batch)")
      ->group(group);
  flag("--allow-batch-change", o.allow_batch_change,
       "resume a checkpoint trained with another global batch: an epoch's steps change, and the "
       "schedules follow the new steps");
  add("--log-every", o.log_every, "steps between metrics records")->check(CLI::PositiveNumber);
  flag("--quiet", o.quiet, "print nothing but errors");
  flag("--memory-report", o.memory_report,
       "at the end, print the memory each purpose (weights, gradients, optimizer state, "
       "pruning, ...) held at its peak and at the process's");
}

void add_range_checks(CLI::App& cmd) {
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
  for (const char* name :
       {"--epochs", "--batch", "--synthetic-size", "--bucket-mb", "--first-bucket-mb", "--patch",
        "--world", "--loss-scale", "--loss-scale-growth-interval"}) {
    if (auto* o = cmd.get_option_no_throw(name)) o->check(positive);
  }
  for (const char* name :
       {"--max-steps",    "--lr",          "--comm-timeout", "--momentum",    "--weight-decay",
        "--warmup",       "--clip-grad",   "--crop-padding", "--threads",     "--checkpoint-every",
        "--train-subset", "--test-subset", "--dim",          "--depth",       "--heads",
        "--global-batch", "--mlp-dim",     "--in-channels",  "--num-classes", "--image-size",
        "--context",      "--vocab-size",  "--eval-every",   "--eval-iters",  "--tokens",
        "--top-k"}) {
    if (auto* o = cmd.get_option_no_throw(name)) o->check(non_negative);
  }
  for (const char* name : {"--sparsity", "--label-smoothing", "--dropout", "--beta1", "--beta2"}) {
    if (auto* o = cmd.get_option_no_throw(name)) o->check(fraction);
  }
}

std::map<std::string, std::string> merge_key_values(const std::string& flag,
                                                    const std::vector<std::string>& earlier,
                                                    const std::vector<std::string>& later) {
  std::map<std::string, std::string> map;
  for (const auto* pairs : {&earlier, &later}) {
    for (const auto& kv : *pairs) {
      auto eq = kv.find('=');
      PAC_CHECK(eq != std::string::npos && eq > 0, "{} '{}' must be key=value", flag, kv);
      map[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  return map;
}

std::vector<std::string> key_value_pairs(const std::map<std::string, std::string>& map) {
  std::vector<std::string> pairs;
  for (const auto& [key, value] : map) pairs.push_back(key + "=" + value);
  return pairs;
}

}  // namespace pac
