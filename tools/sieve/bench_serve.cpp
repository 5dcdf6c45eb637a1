// sieve bench serve: load on an OpenAI-compatible server, measured at the client.
// Method: at each (clients, prompt tokens) point, `clients` streams run at once (each sends
// --rounds requests back to back), or with --request-rate the requests arrive as a Poisson
// process with at most `clients` in flight. Every request is a streamed /v1/completions with
// ignore_eos and greedy sampling, so each produces exactly --max-tokens tokens. Prompts are
// random token ids drawn per request (no two share a prefix, so no server-side prefix cache
// helps), or documents of --prompt-file. Times: TTFT = send -> first content event; ITL = gap
// between content events; TPOT = (e2e - TTFT) / (output tokens - 1), per request. Failures (no
// connection, non-200, an error event, a stream cut before [DONE]) are counted per point with
// the first one shown; they never stop the run. Ctrl-C prints and writes the finished points.
#include "bench_serve.h"

#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "command.h"
#include "eval/http_client.h"

namespace sieve::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int32_t kFirstRandomId = 100;  // below: control and byte tokens in most vocabularies

struct ServeBenchOptions {
  std::string url = "http://127.0.0.1:8080";
  std::vector<int32_t> clients = {1, 4, 8};
  std::vector<int32_t> prompt_tokens = {1024, 4096};
  int32_t max_tokens = 64;
  int32_t rounds = 1;
  double request_rate = 0;  // requests/s (Poisson); 0: every client sends back to back
  std::string prompt_file;
  double slo_ttft_ms = 0;  // 0: no bound
  double slo_itl_ms = 0;
  std::string json_out;
  std::string model;  // "": the first id of GET /v1/models
  std::string api_key;
  int32_t vocab = 32000;  // random ids in [100, vocab): valid in every common vocabulary
  uint64_t seed = 1;
  int32_t warmup = 1;  // unmeasured short requests before the first point
  double timeout_s = 600;
};

std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  if (g_stop.exchange(true)) _exit(130);  // a second Ctrl-C: leave at once
}

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft_ms = 0;
  double e2e_ms = 0;
  std::vector<double> itl_ms;  // gaps between content events
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
  size_t n = 0;
};

// Linear interpolation between order statistics (numpy's default), so small samples compare
// with the Python tools'.
Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  double s = 0;
  for (double x : v) s += x;
  p.mean = s / static_cast<double>(v.size());
  return p;
}

json to_json(const Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}, {"n", p.n}};
}

struct PointResult {
  int32_t clients = 0;
  int32_t prompt_tokens = 0;
  std::vector<RequestResult> reqs;
  double wall_s = 0;
};

class ServeBench {
 public:
  explicit ServeBench(ServeBenchOptions o) : o_(std::move(o)) {}

  int run();

 private:
  std::vector<std::pair<std::string, std::string>> headers() const {
    std::vector<std::pair<std::string, std::string>> h = {{"Content-Type", "application/json"}};
    if (!o_.api_key.empty()) h.emplace_back("Authorization", "Bearer " + o_.api_key);
    return h;
  }
  std::string find_model();
  json prompt_for(int32_t point, int32_t clients, int32_t n_tokens, int64_t index) const;
  RequestResult request(const json& prompt, int32_t max_tokens) const;
  PointResult run_point(int32_t point, int32_t clients, int32_t n_prompt);
  void print_row(const PointResult& p) const;
  json point_json(const PointResult& p) const;
  void write_json(const std::vector<PointResult>& done, bool interrupted) const;

  ServeBenchOptions o_;
  eval::HttpUrl url_;
  std::vector<std::string> docs_;
};

std::string ServeBench::find_model() {
  std::string body;
  int status = 0;
  Status st = eval::http_request(
      "GET", url_, url_.prefix + "/v1/models", headers(), "", 30,
      [&](const eval::HttpResponse& h) { status = h.status; },
      [&](std::string_view piece) {
        body.append(piece);
        return body.size() < (1u << 20);
      });
  if (st.ok() && status == 200) {
    const json j = json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].contains("id") && j["data"][0]["id"].is_string())
      return j["data"][0]["id"].get<std::string>();
  }
  std::fprintf(stderr, "bench serve: GET /v1/models failed (%s); sending model \"default\"\n",
               st.ok() ? fmt::format("HTTP {}", status).c_str() : st.message().c_str());
  return "default";
}

// Random ids from a seed of (--seed, the point, its shape, the request): points of separate
// runs against one server (e.g. 1 x 4K, then 4 x 4K) never share a prompt, so no server's
// prefix cache serves one point with another's prompts.
json ServeBench::prompt_for(int32_t point, int32_t clients, int32_t n_tokens, int64_t index) const {
  std::seed_seq seq{static_cast<uint32_t>(o_.seed),  static_cast<uint32_t>(o_.seed >> 32),
                    static_cast<uint32_t>(point),    static_cast<uint32_t>(clients),
                    static_cast<uint32_t>(n_tokens), static_cast<uint32_t>(index)};
  std::mt19937_64 rng(seq);
  if (!docs_.empty()) {
    // A document, cut to about 4 bytes per token of the point's length.
    const std::string& d = docs_[static_cast<size_t>(index + point) % docs_.size()];
    return d.substr(0, static_cast<size_t>(n_tokens) * 4);
  }
  std::uniform_int_distribution<int32_t> id(kFirstRandomId, o_.vocab - 1);
  json ids = json::array();
  for (int32_t i = 0; i < n_tokens; ++i) ids.push_back(id(rng));
  return ids;
}

// One streamed completion. SSE lines may arrive split across reads; only complete lines are
// parsed.
RequestResult ServeBench::request(const json& prompt, int32_t max_tokens) const {
  RequestResult r;
  const json body = {{"model", o_.model},
                     {"prompt", prompt},
                     {"max_tokens", max_tokens},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  int status = 0;
  std::string pending, error_body;
  bool done = false;
  int64_t events = 0;
  const auto t0 = Clock::now();
  Clock::time_point t_prev{};
  auto ms_since = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  auto on_line = [&](std::string_view line) {
    if (line.substr(0, 5) != "data:") return true;
    line.remove_prefix(5);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line == "[DONE]") {
      done = true;
      return false;
    }
    const json ev = json::parse(line, nullptr, false);
    if (ev.is_discarded()) {
      r.error = "a stream event is not JSON: " + std::string(line.substr(0, 120));
      return false;
    }
    if (ev.contains("error")) {
      r.error = "error event: " + ev["error"].dump().substr(0, 300);
      return false;
    }
    if (ev.contains("usage") && ev["usage"].is_object()) {
      const json& u = ev["usage"];
      if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
        r.output_tokens = u["completion_tokens"].get<int64_t>();
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
        r.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    }
    if (ev.contains("choices") && ev["choices"].is_array() && !ev["choices"].empty()) {
      const json& c = ev["choices"][0];
      const json* text = c.contains("text") ? &c["text"] : nullptr;
      if (!text && c.contains("delta") && c["delta"].contains("content"))
        text = &c["delta"]["content"];
      if (text && text->is_string() && !text->get_ref<const std::string&>().empty()) {
        const auto now = Clock::now();
        if (events == 0)
          r.ttft_ms = ms_since(t0, now);
        else
          r.itl_ms.push_back(ms_since(t_prev, now));
        t_prev = now;
        events++;
      }
    }
    return true;
  };
  Status st = eval::http_post(
      url_, url_.prefix + "/v1/completions", headers(), body.dump(), o_.timeout_s,
      [&](const eval::HttpResponse& h) { status = h.status; },
      [&](std::string_view piece) {
        if (g_stop.load()) return false;
        if (status != 200) {
          error_body.append(piece.substr(0, 600 - std::min<size_t>(600, error_body.size())));
          return true;
        }
        pending.append(piece);
        size_t start = 0;
        for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
          std::string_view line(pending.data() + start, nl - start);
          if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
          if (!on_line(line)) {
            pending.clear();
            return false;
          }
        }
        pending.erase(0, start);
        return true;
      });
  r.e2e_ms = ms_since(t0, Clock::now());
  if (!st.ok())
    r.error = st.message();
  else if (status != 200)
    r.error = fmt::format("HTTP {}: {}", status, error_body.substr(0, 300));
  else if (r.error.empty() && !done) {
    r.error = g_stop.load() ? "interrupted"
                            : fmt::format("the stream ended before [DONE] after {} events", events);
  }
  if (r.output_tokens == 0) r.output_tokens = events;
  if (r.error.empty() && events == 0) r.error = "the stream carried no tokens";
  r.ok = r.error.empty();
  return r;
}

PointResult ServeBench::run_point(int32_t point, int32_t clients, int32_t n_prompt) {
  PointResult p;
  p.clients = clients;
  p.prompt_tokens = n_prompt;
  const int64_t n_requests = static_cast<int64_t>(clients) * o_.rounds;
  p.reqs.resize(static_cast<size_t>(n_requests));
  // Poisson arrivals: offsets from the point's start; back to back: all zero.
  std::vector<double> arrival_s(static_cast<size_t>(n_requests), 0.0);
  if (o_.request_rate > 0) {
    std::mt19937_64 rng(o_.seed * 7919 + static_cast<uint64_t>(point));
    std::exponential_distribution<double> gap(o_.request_rate);
    double t = 0;
    for (double& a : arrival_s) {
      a = t;
      t += gap(rng);
    }
  }
  // Prompts are built before the clock starts (a 4K-token JSON array is not free).
  std::vector<json> prompts(static_cast<size_t>(n_requests));
  for (int64_t i = 0; i < n_requests; ++i)
    prompts[static_cast<size_t>(i)] = prompt_for(point, clients, n_prompt, i);
  std::atomic<int64_t> next{0};
  std::atomic<int32_t> finished_workers{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (int32_t w = 0; w < clients; ++w) {
    workers.emplace_back([&] {
      for (;;) {
        const int64_t i = next++;
        if (i >= n_requests || g_stop.load()) break;
        const auto due = t0 + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(arrival_s[static_cast<size_t>(i)]));
        while (Clock::now() < due && !g_stop.load())
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (g_stop.load()) break;
        p.reqs[static_cast<size_t>(i)] = request(prompts[static_cast<size_t>(i)], o_.max_tokens);
      }
      finished_workers++;
    });
  }
  while (finished_workers.load() < clients && !g_stop.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (g_stop.load()) {
    for (auto& t : workers) t.detach();  // blocked in a receive; the process exits next
    return p;
  }
  for (auto& t : workers) t.join();
  p.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return p;
}

json ServeBench::point_json(const PointResult& p) const {
  std::vector<double> ttft, tpot, itl, prompt;
  int64_t out_tokens = 0, ok = 0, good = 0, errors = 0;
  std::string first_error;
  for (const RequestResult& r : p.reqs) {
    if (!r.ok) {
      errors++;
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ok++;
    out_tokens += r.output_tokens;
    ttft.push_back(r.ttft_ms);
    if (r.output_tokens > 1)
      tpot.push_back((r.e2e_ms - r.ttft_ms) / static_cast<double>(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    if (r.prompt_tokens > 0) prompt.push_back(static_cast<double>(r.prompt_tokens));
    const double max_itl =
        r.itl_ms.empty() ? 0 : *std::max_element(r.itl_ms.begin(), r.itl_ms.end());
    if ((o_.slo_ttft_ms <= 0 || r.ttft_ms <= o_.slo_ttft_ms) &&
        (o_.slo_itl_ms <= 0 || max_itl <= o_.slo_itl_ms))
      good++;
  }
  const double wall = std::max(p.wall_s, 1e-9);
  return {{"clients", p.clients},
          {"prompt_tokens", p.prompt_tokens},
          {"prompt_tokens_mean", prompt.empty() ? 0.0 : percentiles(prompt).mean},
          {"requests", p.reqs.size()},
          {"completed", ok},
          {"errors", errors},
          {"first_error", first_error},
          {"wall_s", p.wall_s},
          {"output_tokens", out_tokens},
          {"output_tok_s", static_cast<double>(out_tokens) / wall},
          {"requests_s", static_cast<double>(ok) / wall},
          {"goodput_req_s", static_cast<double>(good) / wall},
          {"slo_met", good},
          {"ttft_ms", to_json(percentiles(ttft))},
          {"tpot_ms", to_json(percentiles(tpot))},
          {"itl_ms", to_json(percentiles(itl))}};
}

void ServeBench::print_row(const PointResult& p) const {
  const json j = point_json(p);
  auto trio = [&](const char* k) {
    return fmt::format("{:.0f} / {:.0f} / {:.0f}", j[k]["p50"].get<double>(),
                       j[k]["p90"].get<double>(), j[k]["p99"].get<double>());
  };
  std::printf("| %d | %d | %lld | %lld | %.1f | %.2f | %.3f | %s | %s | %s | %.3f |\n", p.clients,
              p.prompt_tokens, static_cast<long long>(j["completed"].get<int64_t>()),
              static_cast<long long>(j["errors"].get<int64_t>()), p.wall_s,
              j["output_tok_s"].get<double>(), j["requests_s"].get<double>(),
              trio("ttft_ms").c_str(), trio("tpot_ms").c_str(), trio("itl_ms").c_str(),
              j["goodput_req_s"].get<double>());
  if (j["errors"].get<int64_t>() > 0)
    std::printf("|   first error: %s |\n", j["first_error"].get<std::string>().c_str());
  std::fflush(stdout);
}

void ServeBench::write_json(const std::vector<PointResult>& done, bool interrupted) const {
  if (o_.json_out.empty()) return;
  json pts = json::array();
  for (const PointResult& p : done) pts.push_back(point_json(p));
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const json j = {{"tool", "sieve bench serve"},
                  {"date", date},
                  {"url", o_.url},
                  {"model", o_.model},
                  {"max_tokens", o_.max_tokens},
                  {"rounds", o_.rounds},
                  {"request_rate", o_.request_rate},
                  {"prompts", o_.prompt_file.empty() ? "random token ids" : o_.prompt_file},
                  {"slo", {{"ttft_ms", o_.slo_ttft_ms}, {"itl_ms", o_.slo_itl_ms}}},
                  {"interrupted", interrupted},
                  {"points", pts}};
  std::ofstream f(o_.json_out);
  f << j.dump(2) << "\n";
  if (!f) std::fprintf(stderr, "bench serve: cannot write %s\n", o_.json_out.c_str());
}

int ServeBench::run() {
  auto u = eval::parse_http_url(o_.url);
  if (!u) throw UserError(u.message());
  url_ = *u;
  if (!o_.prompt_file.empty()) {
    std::ifstream f(o_.prompt_file);
    if (!f) throw UserError(fmt::format("--prompt-file {}: cannot open", o_.prompt_file));
    // One document per line: plain text, or a JSON object with "prompt" or "text".
    for (std::string line; std::getline(f, line);) {
      if (line.empty()) continue;
      const json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("prompt") && j["prompt"].is_string())
        docs_.push_back(j["prompt"].get<std::string>());
      else if (j.is_object() && j.contains("text") && j["text"].is_string())
        docs_.push_back(j["text"].get<std::string>());
      else
        docs_.push_back(line);
    }
    if (docs_.empty())
      throw UserError(fmt::format("--prompt-file {}: no documents (one per line)", o_.prompt_file));
  }
  if (o_.model.empty()) o_.model = find_model();
  std::signal(SIGINT, on_sigint);
  for (int32_t i = 0; i < o_.warmup && !g_stop.load(); ++i) {
    const RequestResult r = request(prompt_for(-1, 0, 16, i), 4);
    if (!r.ok) std::fprintf(stderr, "bench serve: warm-up request failed: %s\n", r.error.c_str());
  }
  std::printf("sieve bench serve: %s, model %s, %d output tokens, %s\n\n", o_.url.c_str(),
              o_.model.c_str(), o_.max_tokens,
              o_.request_rate > 0
                  ? fmt::format("Poisson arrivals at {:g} req/s", o_.request_rate).c_str()
                  : fmt::format("{} round(s) per client", o_.rounds).c_str());
  std::printf(
      "| clients | prompt tok | done | errors | wall s | out tok/s | req/s | TTFT p50/p90/p99 ms | "
      "TPOT p50/p90/p99 ms "
      "| ITL p50/p90/p99 ms | goodput req/s |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<PointResult> done;
  int32_t point = 0;
  for (int32_t c : o_.clients) {
    for (int32_t n : o_.prompt_tokens) {
      PointResult p = run_point(point++, c, n);
      if (g_stop.load()) {
        std::printf("\ninterrupted: %zu point(s) finished\n", done.size());
        write_json(done, true);
        std::fflush(stdout);
        std::_Exit(130);
      }
      print_row(p);
      done.push_back(std::move(p));
      write_json(done, false);  // what is finished survives a later crash or kill
    }
  }
  return 0;
}

}  // namespace

std::function<int()> setup_bench_serve(CLI::App& app) {
  auto o = std::make_shared<ServeBenchOptions>();
  app.add_option("--url", o->url, "server base URL (http://host:port[/prefix])");
  app.add_option("--clients", o->clients, "concurrent clients per point (comma list)")
      ->delimiter(',');
  app.add_option("--prompt-tokens", o->prompt_tokens, "prompt length per point (comma list)")
      ->delimiter(',');
  app.add_option("--max-tokens", o->max_tokens, "tokens generated per request (ignore_eos)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--rounds", o->rounds, "requests each client sends back to back")
      ->check(CLI::Range(1, 100000));
  app.add_option("--request-rate", o->request_rate,
                 "Poisson arrivals at this many requests/s (clients x rounds requests, at most "
                 "clients in flight)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--prompt-file", o->prompt_file,
                 "documents, one per line (text, or JSON with \"prompt\"/\"text\"), cut to ~4 "
                 "bytes per prompt token");
  app.add_option("--slo-ttft-ms", o->slo_ttft_ms, "goodput: a request's TTFT must be at most this")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--slo-itl-ms", o->slo_itl_ms,
                 "goodput: every gap between a request's tokens must be at most this")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--json", o->json_out, "write the points as JSON to this file");
  app.add_option("--model", o->model,
                 "model field of the requests (default: the first of GET /v1/models)");
  app.add_option("--api-key", o->api_key, "sent as Authorization: Bearer KEY");
  app.add_option("--vocab", o->vocab, "random prompt ids are drawn from [100, VOCAB)")
      ->check(CLI::Range(101, 1 << 24));
  app.add_option("--seed", o->seed, "prompt and arrival seed");
  app.add_option("--warmup", o->warmup, "short unmeasured requests before the first point")
      ->check(CLI::Range(0, 100));
  app.add_option("--timeout", o->timeout_s,
                 "seconds to wait for a connection or the next bytes of a stream")
      ->check(CLI::Range(1.0, 1e6));
  return [o]() {
    for (int32_t c : o->clients)
      if (c < 1 || c > 4096) throw UserError("--clients values must be in [1, 4096]");
    for (int32_t n : o->prompt_tokens)
      if (n < 1 || n > (1 << 22)) throw UserError("--prompt-tokens values must be in [1, 4M]");
    if (o->clients.empty() || o->prompt_tokens.empty())
      throw UserError("--clients and --prompt-tokens need a value");
    return ServeBench(*o).run();
  };
}

}  // namespace sieve::cli
