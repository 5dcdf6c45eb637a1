// sieve pull NAME: installs a known model into the cache; the last stdout line is its path.
#include <cstdio>

#include "command.h"
#include "model_cache.h"

namespace sieve::cli {
namespace {

std::function<int()> setup(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  auto list = std::make_shared<bool>(false);
  app.add_option("name", *name, "model to pull (smollm2, gemma3-270m)");
  app.add_flag("--quiet-progress", *quiet, "no progress output");
  app.add_flag("--list", *list, "list the known models");
  return [=]() {
    if (*list || name->empty()) {
      for (const auto& m : known_models())
        std::printf("%-12s %s\n", m.name.c_str(), m.description.c_str());
      if (!*list) throw UserError("name a model to pull (see the list above)");
      return 0;
    }
    const KnownModel* m = find_known_model(*name);
    if (!m) {
      std::string names;
      for (const auto& k : known_models()) names += (names.empty() ? "" : ", ") + k.name;
      throw UserError("unknown model '" + *name + "' (known: " + names +
                      "); other GGUF files are used with -m PATH");
    }
    const std::string path = pull_model(*m, *quiet);
    std::printf("%s\n", path.c_str());
    return 0;
  };
}

SIEVE_COMMAND("pull", "download a known model into the cache (prints its path last)", setup);

}  // namespace
}  // namespace sieve::cli
