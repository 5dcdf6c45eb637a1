// `sieve inspect FILE [--all]`: validates a GGUF file and prints its header, metadata and
// tensor table. A file the reader rejects is a user error (one line, exit code 1).
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "gguf/gguf_file.h"

namespace sieve::cli {
namespace {

std::function<int()> setup_inspect(CLI::App& sub) {
  struct Options {
    std::string path;
    bool all = false;
  };
  auto opt = std::make_shared<Options>();
  sub.add_option("file", opt->path, "GGUF file to inspect")->required();
  sub.add_flag("--all", opt->all, "print every array element and full strings");
  return [opt] {
    auto f = GgufFile::open(opt->path);
    if (!f.ok()) throw UserError(f.message());
    const std::string text = gguf_describe(**f, opt->all);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  };
}

}  // namespace
}  // namespace sieve::cli

SIEVE_COMMAND("inspect", "validate a GGUF file and print its metadata and tensors",
              sieve::cli::setup_inspect);
