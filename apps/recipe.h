// Recipes: a `pactrain train` run's options as a small TOML file (apps/recipes/*.toml), as
// nanoGPT keeps its configs. `--config FILE` reads one; the command line overrides it key by key;
// `--print-config` prints the options a run resolves to. Every run records its recipe in the
// metrics file's first record and in its checkpoints, so either file can be given to `--config`
// to run that recipe again.
//
//   base = "resnet20-fashion-mnist.toml"   # optional: a recipe this one changes (same folder)
//   model = "resnet20"          # every key is a `train` option without its "--"
//   flip = true                 # a flag
//   prune-exclude = ["conv1.weight"]
//   [compress-opt]              # key=value options are tables, merged key by key
//   enc = "ternary"
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pac {

// Options that say where a run's output goes, not how it trains: never part of a recipe.
bool is_output_option(const std::string& key);

struct Recipe {
  std::string text;    // TOML
  std::string source;  // the file it came from, for errors
};

// The recipes `paths` name (--config, repeatable), in the order they win: the last path first,
// then the recipe it names as its `base`, that one's base, and so on, then the path before it.
// A path is a TOML recipe, or a checkpoint (.safetensors) or a metrics file (JSON lines), whose
// recorded recipe is read. Errors name the file and what it lacked.
std::vector<Recipe> read_recipes(const std::vector<std::string>& paths);

// The key=value pairs of a recipe's tables ([compress-opt], [prune-opt]), to be merged under the
// command line's own pairs.
struct RecipeTables {
  std::vector<std::string> compress_options, prune_options;
};

// Sets every option of `command` that the command line left unset from the recipes, the first
// that has it winning; the tables' pairs are merged in the other order, so the winner's come
// last. An unknown key, a table other than [compress-opt] and [prune-opt], an output option or a
// value its option refuses is an error naming the recipe and the key.
RecipeTables apply_recipes(CLI::App& command, const std::vector<Recipe>& recipes);

// The options `command` resolved to (given, from a recipe, or defaults) as a recipe, in the order
// of `train --help`. `key_values` are the merged [compress-opt] and [prune-opt] pairs.
std::string recipe_text(const CLI::App& command, const RecipeTables& key_values);

}  // namespace pac
