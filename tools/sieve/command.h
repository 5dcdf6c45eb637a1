// Subcommand registry: each cmd_<name>.cpp registers itself with SIEVE_COMMAND, so adding a
// subcommand touches one file. Exit codes: 0 success, 1 user error, 2 internal error.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>

namespace sieve::cli {

// Bad input from the user (file, flag, prompt): printed as one line, exit code 1.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Adds the subcommand's options to `sub` and returns what runs it (returns the exit code).
using CommandSetup = std::function<int()> (*)(CLI::App& sub);

struct CommandRegistration {
  CommandRegistration(const char* name, const char* help, CommandSetup setup);
};

struct RegisteredCommand {
  std::string name;
  std::string help;
  CommandSetup setup;
};
std::vector<RegisteredCommand>& command_registry();

}  // namespace sieve::cli

#define SIEVE_CLI_CONCAT2(a, b) a##b
#define SIEVE_CLI_CONCAT(a, b) SIEVE_CLI_CONCAT2(a, b)
#define SIEVE_COMMAND(name, help, setup) \
  static ::sieve::cli::CommandRegistration SIEVE_CLI_CONCAT(sieve_cmd_, __LINE__)(name, help, setup)
