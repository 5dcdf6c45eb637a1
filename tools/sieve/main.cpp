#include <algorithm>
#include <cstdio>
#include <exception>

#include "command.h"
#include "core/log.h"

namespace sieve::cli {

std::vector<RegisteredCommand>& command_registry() {
  static std::vector<RegisteredCommand> r;
  return r;
}

CommandRegistration::CommandRegistration(const char* name, const char* help, CommandSetup setup) {
  command_registry().push_back({name, help, setup});
}

}  // namespace sieve::cli

int main(int argc, char** argv) {
  using namespace sieve::cli;
  CLI::App app{"sieve: long-context LLM inference with dynamic sparse attention"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sieve 0.1.0");
  bool quiet = false, verbose = false;
  app.add_flag("-q,--quiet", quiet, "only errors on stderr");
  app.add_flag("-v,--verbose", verbose, "debug logging on stderr");

  auto& reg = command_registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (auto& c : reg) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    runners.emplace_back(sub, c.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help/--version exit 0; every other parse error is a user error (exit 1).
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "error: %s (see --help)\n", e.what());
    return 1;
  }
  if (quiet) sieve::set_log_level(sieve::LogLevel::error);
  if (verbose) sieve::set_log_level(sieve::LogLevel::debug);
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const UserError& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "internal error: %s\n", e.what());
      return 2;
    }
  }
  return 2;
}
