// sieve bench serve: a load generator for any OpenAI-compatible server (sieve serve,
// llama-server, vLLM). Streams /v1/completions with ignore_eos at each (clients, prompt length)
// point and reports output tok/s, requests/s, TTFT / TPOT / ITL percentiles and goodput.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace sieve::cli {

// Adds the `serve` subcommand's options to `sub`; the returned function runs it.
std::function<int()> setup_bench_serve(CLI::App& sub);

}  // namespace sieve::cli
