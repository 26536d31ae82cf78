#include "apps/recipe.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/safetensors.h"
#include "core/error.h"

namespace pac {

bool is_output_option(const std::string& key) {
  for (const char* output : {"config", "print-config", "metrics", "checkpoint", "resume",
                             "allow-batch-change", "quiet", "memory-report", "help"}) {
    if (key == output) return true;
  }
  return false;
}

namespace {

// The tables a recipe may have: `train` options that take key=value pairs.
const std::vector<std::string> kTables = {"compress-opt", "prune-opt"};

bool is_table(const std::string& key) {
  return std::find(kTables.begin(), kTables.end(), key) != kTables.end();
}

std::vector<CLI::ConfigItem> parse_toml(const Recipe& recipe) {
  std::istringstream stream(recipe.text);
  try {
    return CLI::ConfigTOML().from_config(stream);
  } catch (const CLI::Error& e) {
    PAC_FAIL("--config {}: {}", recipe.source, e.what());
  }
}

std::string file_start(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  PAC_CHECK(in.good(), "--config: cannot open '{}'", path);
  std::string start(bytes, '\0');
  in.read(start.data(), static_cast<std::streamsize>(bytes));
  start.resize(static_cast<size_t>(in.gcount()));
  return start;
}

// A metrics file's recipe: its first record of kind "recipe".
std::string recipe_from_metrics(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    PAC_CHECK(!record.is_discarded(), "--config {}: line {} is not JSON", path, number);
    if (record.value("kind", "") == "recipe") return record.at("recipe").get<std::string>();
  }
  PAC_FAIL(
      "--config {}: the metrics file holds no recipe record (it was written before runs "
      "recorded their recipes)",
      path);
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

bool is_number_option(const CLI::Option& option) {
  const std::string type = option.get_type_name();
  for (const char* prefix : {"INT", "UINT", "FLOAT"}) {
    if (type.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// A flag takes no value on the command line (`--flip`); in a recipe it is `flip = true`.
bool is_flag(const CLI::Option& option) { return option.get_expected_max() == 0; }

std::string toml_value(const CLI::Option& option, const std::string& value) {
  return is_number_option(option) ? value : quoted(value);
}

// --batch and --global-batch are one setting in two forms: whichever the command line or a
// recipe that wins gives, the other form is not taken from a recipe below it.
const char* other_batch_form(const std::string& key) {
  return key == "batch" ? "--global-batch" : key == "global-batch" ? "--batch" : nullptr;
}

// One recipe's keys into the options the command line and the recipes before it left unset;
// its tables' pairs returned.
RecipeTables apply_recipe(CLI::App& command, const Recipe& recipe) {
  const std::string& source = recipe.source;
  RecipeTables tables;
  const std::vector<CLI::ConfigItem> items = parse_toml(recipe);
  auto has = [&](const char* key) {
    return std::any_of(items.begin(), items.end(), [&](const CLI::ConfigItem& item) {
      return item.parents.empty() && item.name == key;
    });
  };
  PAC_CHECK(!(has("batch") && has("global-batch")),
            "--config {}: give batch (per rank) or global-batch, not both", source);
  for (const CLI::ConfigItem& item : items) {
    // Section markers ("++" opens a table, "--" closes one), and the base, already followed.
    if (item.name == "++" || item.name == "--") continue;
    if (item.name == "base" && item.parents.empty()) continue;
    if (!item.parents.empty()) {
      const std::string table = fmt::format("{}", fmt::join(item.parents, "."));
      PAC_CHECK(item.parents.size() == 1 && is_table(table),
                "--config {}: unknown table [{}]; a recipe's tables are [compress-opt] and "
                "[prune-opt]",
                source, table);
      PAC_CHECK(item.inputs.size() == 1, "--config {}: [{}] {} must be one value", source, table,
                item.name);
      auto& pairs = table == "compress-opt" ? tables.compress_options : tables.prune_options;
      pairs.push_back(item.name + "=" + item.inputs.front());
      continue;
    }
    PAC_CHECK(!is_table(item.name), "--config {}: '{}' must be a table of key = value lines ([{}])",
              source, item.name, item.name);
    PAC_CHECK(!is_output_option(item.name),
              "--config {}: '{}' says where a run's output goes; give --{} on the command line",
              source, item.name, item.name);
    CLI::Option* option = command.get_option_no_throw("--" + item.name);
    PAC_CHECK(option != nullptr, "--config {}: unknown key '{}' (`pactrain {}` has no --{})",
              source, item.name, command.get_name(), item.name);
    if (option->count() > 0) continue;  // the command line, or a recipe that wins, set it
    if (const char* other = other_batch_form(item.name);
        other && command.get_option(other)->count() > 0)
      continue;  // the batch was given in its other form by what wins
    try {
      if (is_flag(*option)) {
        CLI::ConfigTOML formatter;
        option->add_result(option->get_flag_value(item.name, formatter.to_flag(item)));
      } else {
        option->add_result(item.inputs);
      }
      option->run_callback();
    } catch (const CLI::Error& e) {
      PAC_FAIL("--config {}: {}", source, e.what());
    }
  }
  return tables;
}

// The recipe in `path` as it is: a TOML file's text, or what a checkpoint or metrics file recorded.
std::string read_recipe(const std::string& path) {
  const std::string start = file_start(path, 9);
  // safetensors: an 8-byte header length, then the JSON header.
  if (start.size() == 9 && start[8] == '{') {
    TensorFile file = load_safetensors(path);
    auto it = file.metadata.find("recipe");
    PAC_CHECK(it != file.metadata.end(),
              "--config {}: the checkpoint holds no recipe (it was written before runs recorded "
              "their recipes, or by a program that is not `pactrain train`)",
              path);
    return it->second;
  }
  if (!start.empty() && start[0] == '{') return recipe_from_metrics(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A recipe's `base = "FILE"`, as a path next to the recipe; empty when it has none.
std::string base_of(const Recipe& recipe) {
  for (const CLI::ConfigItem& item : parse_toml(recipe)) {
    if (item.name != "base" || !item.parents.empty()) continue;
    PAC_CHECK(item.inputs.size() == 1 && !item.inputs.front().empty(),
              "--config {}: base must name one recipe file", recipe.source);
    return (std::filesystem::path(recipe.source).parent_path() / item.inputs.front()).string();
  }
  return "";
}

}  // namespace

std::vector<Recipe> read_recipes(const std::vector<std::string>& paths) {
  std::vector<Recipe> recipes;
  for (auto path = paths.rbegin(); path != paths.rend(); ++path) {
    std::vector<std::string> chain;  // this path's recipe and its bases, to find a loop
    for (std::string next = *path; !next.empty();) {
      PAC_CHECK(std::find(chain.begin(), chain.end(), next) == chain.end(),
                "--config {}: its bases come back to {}", *path, next);
      PAC_CHECK(chain.empty() || std::filesystem::exists(next),
                "--config {}: its base {} does not exist", chain.back(), next);
      chain.push_back(next);
      recipes.push_back({read_recipe(next), next});
      next = base_of(recipes.back());
    }
  }
  return recipes;
}

RecipeTables apply_recipes(CLI::App& command, const std::vector<Recipe>& recipes) {
  std::vector<RecipeTables> own;
  for (const Recipe& recipe : recipes) own.push_back(apply_recipe(command, recipe));
  RecipeTables tables;
  for (auto it = own.rbegin(); it != own.rend(); ++it) {
    tables.compress_options.insert(tables.compress_options.end(), it->compress_options.begin(),
                                   it->compress_options.end());
    tables.prune_options.insert(tables.prune_options.end(), it->prune_options.begin(),
                                it->prune_options.end());
  }
  return tables;
}

std::string recipe_text(const CLI::App& command, const RecipeTables& key_values) {
  std::string out;
  std::string group;
  for (const CLI::Option* option : command.get_options()) {
    const std::string key = option->get_single_name();
    if (!option->get_configurable() || is_output_option(key) || is_table(key)) continue;
    // The batch in one form: the global one when it was given, else per rank.
    const bool global_batch_given = command.get_option("--global-batch")->count() > 0;
    if ((key == "batch" && global_batch_given) || (key == "global-batch" && !global_batch_given))
      continue;
    std::string value;
    if (is_flag(*option)) {
      value = option->count() > 0 && option->as<bool>() ? "true" : "false";
    } else {
      std::vector<std::string> values = option->results();
      if (values.empty() && !option->get_default_str().empty())
        values = {option->get_default_str()};
      if (values.empty()) continue;  // unset, and no default to write down
      if (option->get_expected_max() > 1) {
        std::vector<std::string> items;
        for (const auto& v : values) items.push_back(toml_value(*option, v));
        value = fmt::format("[{}]", fmt::join(items, ", "));
      } else {
        value = toml_value(*option, values.back());
      }
    }
    if (option->get_group() != group) {
      group = option->get_group();
      out += fmt::format("{}# {}\n", out.empty() ? "" : "\n", group);
    }
    out += fmt::format("{} = {}\n", key, value);
  }
  auto table = [&](const char* name, const std::vector<std::string>& pairs) {
    if (pairs.empty()) return;
    out += fmt::format("\n[{}]\n", name);
    for (const auto& kv : pairs) {
      const size_t eq = kv.find('=');
      out += fmt::format("{} = {}\n", kv.substr(0, eq), quoted(kv.substr(eq + 1)));
    }
  };
  table("compress-opt", key_values.compress_options);
  table("prune-opt", key_values.prune_options);
  return out;
}

}  // namespace pac
