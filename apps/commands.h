// The options of the `pactrain` subcommands, declared on CLI11 apps in the groups that
// `--help` shows; apps/main.cpp builds the command line from these and runs what it names.
#pragma once

#include <string>
#include <vector>

#include "apps/models/registry.h"
#include "apps/trainer.h"

namespace CLI {
class App;
}

namespace pac {

// What the command line gives as lists, merged into TrainOptions after parsing (a recipe's
// tables go under the command line's pairs).
struct CommandLists {
  std::vector<std::string> compress_options, prune_options;  // key=value
  bool no_decay_1d = false;
};

void add_model_options(CLI::App& command, models::ModelConfig& model, bool from_data);
void add_prune_options(CLI::App& command, TrainOptions& o, CommandLists& lists);
// Every `train` option, into `o` and `lists`.
void add_train_options(CLI::App& command, TrainOptions& o, CommandLists& lists);
// Range checks on the numeric options `command` has, so that a bad value is refused while
// parsing, with what is allowed.
void add_range_checks(CLI::App& command);

// key=value pairs into a map: `earlier` first, so that `later` (the command line) wins a key.
std::map<std::string, std::string> merge_key_values(const std::string& flag,
                                                    const std::vector<std::string>& earlier,
                                                    const std::vector<std::string>& later);
// The map's pairs as "key=value".
std::vector<std::string> key_value_pairs(const std::map<std::string, std::string>& map);

}  // namespace pac
