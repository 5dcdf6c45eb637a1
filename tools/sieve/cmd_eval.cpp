// sieve eval: long-context accuracy (RULER, InfiniteBench retrieval, needle-in-a-haystack grid)
// over tasks x lengths x policies (x models), resumable, with JSONL/markdown/HTML reports.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend.h"
#include "command.h"
#include "core/log.h"
#include "eval/haystack.h"
#include "eval/matrix.h"
#include "eval/prompt.h"
#include "eval/report.h"
#include "eval/summary.h"
#include "model_cache.h"
#include "progress.h"

namespace sieve::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct EvalOptions {
  ModelOptions rope;  // --rope-scaling / --rope-scale / --yarn-* for every model of the run
  std::vector<std::string> models;
  int32_t threads = 0;
  std::string backend = "cpu";
  std::vector<std::string> tasks = {"all"};
  std::vector<std::string> lengths = {"4K"};
  std::vector<std::string> policies = {"dense"};
  std::vector<std::string> sets;  // --set key=value, for every policy but dense
  std::string head_plan;          // --head-plan: appended to every rtpurbo item
  int32_t n = 5;
  int32_t grid_n = 1;
  std::vector<double> depths = {0, 25, 50, 75, 100};
  uint64_t seed = 42;
  bool chat = false;
  std::string out = "sieve-eval";
  bool json = false;
  std::string server, server_model;
  bool no_sieve_field = false;
  double timeout_s = 3600;
  bool report_only = false;
  bool no_prefix_cache = false;
  bool stop_newline = false;
  bool prompts_only = false;
  int32_t batch = 512;
  int32_t concurrency = 32;  // --backend cuda: samples in flight at once
  std::string data_dir;
  bool list_tasks = false;
};

// The RoPE flags as given (for runs.log and the reports' command line).
std::string rope_flags(const ModelOptions& r) {
  std::string c;
  if (!r.rope_scaling.empty()) c += " --rope-scaling " + r.rope_scaling;
  if (r.rope_scale > 0) c += fmt::format(" --rope-scale {:g}", r.rope_scale);
  if (r.yarn_orig_ctx > 0) c += fmt::format(" --yarn-orig-ctx {}", r.yarn_orig_ctx);
  if (r.yarn_ext_factor >= 0) c += fmt::format(" --yarn-ext-factor {:g}", r.yarn_ext_factor);
  if (r.yarn_attn_factor >= 0) c += fmt::format(" --yarn-attn-factor {:g}", r.yarn_attn_factor);
  if (r.yarn_beta_fast >= 0) c += fmt::format(" --yarn-beta-fast {:g}", r.yarn_beta_fast);
  if (r.yarn_beta_slow >= 0) c += fmt::format(" --yarn-beta-slow {:g}", r.yarn_beta_slow);
  return c;
}

// "4K" / "4k" -> 4096, "4096" -> 4096, "1M" -> 1048576.
int32_t parse_length(const std::string& s) {
  if (s.empty()) throw UserError("empty context length in --ctx");
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (const std::exception&) {
    throw UserError("--ctx " + s + ": not a length (examples: 4096, 4K, 32K)");
  }
  const std::string suffix = s.substr(pos);
  if (suffix == "K" || suffix == "k") {
    v *= 1024;
  } else if (suffix == "M" || suffix == "m") {
    v *= 1024 * 1024;
  } else if (!suffix.empty()) {
    throw UserError("--ctx " + s + ": unknown suffix '" + suffix + "' (use K or M)");
  }
  if (v <= 0 || v > (1 << 24)) throw UserError("--ctx " + s + ": out of range");
  return static_cast<int32_t>(v);
}

std::string join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string command_line(const EvalOptions& o) {
  std::string c = "sieve eval";
  for (const std::string& m : o.models) c += " -m " + m;
  c += " --tasks " + join(o.tasks) + " --ctx " + join(o.lengths) + " --policy " + join(o.policies);
  for (const std::string& kv : o.sets) c += " --set " + kv;
  if (!o.head_plan.empty()) c += " --head-plan " + o.head_plan;
  c += " -n " + std::to_string(o.n) + " --seed " + std::to_string(o.seed);
  if (o.grid_n != 1) c += " --grid-n " + std::to_string(o.grid_n);
  std::string d;
  for (double x : o.depths) d += (d.empty() ? "" : ",") + fmt::format("{:g}", x);
  if (d != "0,25,50,75,100") c += " --depths " + d;
  if (o.chat) c += " --chat";
  c += rope_flags(o.rope);
  if (o.backend != "cpu") c += " --backend " + o.backend;
  if (o.backend == "cuda") c += " --concurrency " + std::to_string(o.concurrency);
  if (!o.server.empty()) c += " --server " + o.server;
  if (!o.server_model.empty()) c += " --server-model " + o.server_model;
  if (o.no_sieve_field) c += " --no-sieve-field";
  if (o.no_prefix_cache) c += " --no-prefix-cache";
  if (o.stop_newline) c += " --stop-newline";
  c += " --out " + o.out;
  return c;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw UserError("cannot write " + p.string());
}

// summary.json / --json: one object for one run group, an array for several.
json summary_of(const std::vector<eval::SampleRecord>& recs) {
  const std::vector<eval::SummaryRow> rows = eval::summarize(recs);
  const std::vector<eval::RunGroup> groups = eval::run_groups(rows);
  if (groups.size() == 1) return eval::summary_json(eval::rows_of(rows, groups[0]));
  json arr = json::array();
  for (const eval::RunGroup& g : groups) arr.push_back(eval::summary_json(eval::rows_of(rows, g)));
  return arr;
}

// runs.log keeps the command of every run into this directory; the reports list them, since
// samples.jsonl may hold the results of several runs.
fs::path runs_log(const fs::path& dir) {
  return dir / "runs.log";
}

// Reports over the directory's records of this build's generators (older ones would mix
// different samples under one cell).
void write_reports(const fs::path& dir, const std::vector<eval::SampleRecord>& all) {
  int64_t skipped = 0;
  const std::vector<eval::SampleRecord> recs = eval::current_records(all, &skipped);
  if (skipped > 0) {
    log_warn("{}: {} sample(s) from another generator version are left out of the reports",
             (dir / "samples.jsonl").string(), skipped);
  }
  eval::ReportMeta meta;
  meta.generated_at = eval::utc_now_iso();
  {
    std::ifstream in(runs_log(dir));
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty()) meta.notes.push_back("Run: " + line);
    }
  }
  meta.notes.push_back(fmt::format("{} samples in {} (generators {}); greedy decoding.",
                                   recs.size(), (dir / "samples.jsonl").string(),
                                   eval::generator_tag()));
  write_file(dir / "summary.json", summary_of(recs).dump(2) + "\n");
  write_file(dir / "summary.md", eval::markdown_report(recs, meta));
  write_file(dir / "report.html", eval::html_report(recs, meta));
}

// Every planned sample, fitted, as one JSON line: RULER's record fields (input,
// answer_prefix, outputs, length) plus Sieve's (id, seed, depth, units, tokens).
void write_prompts(const fs::path& file, const eval::MatrixSpec& spec, const eval::TaskContext& tc,
                   const eval::PromptEncoder& enc, const std::string& model) {
  std::ofstream out(file, std::ios::app | std::ios::binary);
  if (!out) throw UserError("cannot write " + file.string());
  int64_t n = 0;
  for (int32_t L : spec.lengths) {
    for (const std::string& name : spec.tasks) {
      const eval::Task* task = eval::find_task(name);
      for (const eval::SampleSpec& s :
           eval::plan_samples(*task, L, spec.n, spec.grid_n, spec.depths, spec.seed)) {
        auto f =
            eval::fit_sample(*task, s, tc, [&](const eval::TaskText& t) { return enc.render(t); });
        if (!f) throw UserError(name + " at " + std::to_string(L) + " tokens: " + f.message());
        json j = {{"id", eval::sample_id(s)},
                  {"task", name},
                  {"model", model},
                  {"format", std::string(eval::format_name(enc.format()))},
                  {"length_target", L},
                  {"seed", fmt::format("{:016x}", s.seed)},
                  {"input", f->text.input},
                  {"answer_prefix", f->text.answer_prefix},
                  {"prompt", f->prompt.text},
                  {"outputs", f->text.answers},
                  {"length", f->prompt.tokens.size()},
                  {"max_new_tokens", f->max_new_tokens},
                  {"units", f->units},
                  {"pad", f->pad},
                  {"depth", f->text.depth < 0 ? json(nullptr) : json(f->text.depth)}};
        out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
        ++n;
      }
    }
  }
  log_info("{}: {} prompts written to {}", model, n, file.string());
}

void list_tasks() {
  std::printf("%-16s %-14s %-18s %6s  %s\n", "task", "suite", "metric", "gen", "description");
  for (const auto& t : eval::all_tasks()) {
    const eval::TaskInfo& i = t->info();
    std::printf("%-16s %-14s %-18s %6d  %s\n", i.name.c_str(), i.suite.c_str(),
                std::string(eval::metric_name(i.metric)).c_str(), i.max_new_tokens,
                i.description.c_str());
  }
  std::printf("\ngroups: all, ruler, infinitebench (ib), niah\n");
}

std::string fmt_duration(double s) {
  if (s < 90) return fmt::format("{:.0f}s", s);
  if (s < 5400) return fmt::format("{:.0f}m", s / 60);
  return fmt::format("{:.1f}h", s / 3600);
}

int run(EvalOptions& o) {
  if (o.list_tasks) {
    list_tasks();
    return 0;
  }
  auto names = eval::expand_task_names(o.tasks);
  if (!names) throw UserError(names.message());
  eval::MatrixSpec spec;
  spec.tasks = *names;
  for (const std::string& s : o.lengths) spec.lengths.push_back(parse_length(s));
  std::vector<std::string> items = o.policies;
  if (!o.head_plan.empty()) {
    if (Status s = eval::attach_head_plan(items, o.head_plan, "--policy"); !s)
      throw UserError(s.message());
  }
  auto policies = eval::make_policy_list(items, o.sets);
  if (!policies) throw UserError(policies.message());
  spec.policies = std::move(*policies);
  spec.n = o.n;
  spec.grid_n = o.grid_n;
  spec.depths = o.depths;
  spec.seed = o.seed;
  spec.stop_at_newline = o.stop_newline;
  if (Status s = eval::validate_spec(spec); !s) throw UserError(s.message());
  if (o.report_only && o.prompts_only)
    throw UserError("--report-only and --prompts-only exclude each other");
  if (o.backend == "cuda" && !o.server.empty())
    throw UserError(
        "--backend cuda runs the model here; --server evaluates a server: give one of them");
  if (o.no_sieve_field) {
    if (o.server.empty()) throw UserError("--no-sieve-field only applies with --server");
    for (const PolicyPtr& p : spec.policies) {
      if (p->describe() != "dense") {
        throw UserError(
            "--no-sieve-field sends no policy, so the server runs its own attention; "
            "only --policy dense can be recorded (policy " +
            p->describe() + ")");
      }
    }
  }

  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) throw UserError("cannot create the output directory " + o.out + ": " + ec.message());
  const fs::path dir(o.out);
  std::unique_ptr<eval::SampleStore> store;
  if (!o.prompts_only) {
    auto s = eval::SampleStore::open((dir / "samples.jsonl").string());
    if (!s) throw UserError(s.message());
    store = std::move(*s);
    if (store->bad_lines() > 0) {
      log_warn("{}: skipped {} unreadable line(s) (an interrupted write?); those samples run again",
               store->path(), store->bad_lines());
    }
  }
  if (o.report_only) {
    int64_t older = 0;
    const std::vector<eval::SampleRecord> recs = eval::current_records(store->records(), &older);
    if (recs.empty()) {
      throw UserError(fmt::format("no samples of generators {} in {} to report on{}",
                                  eval::generator_tag(), store->path(),
                                  older > 0 ? fmt::format(" ({} older ones)", older) : ""));
    }
    write_reports(dir, store->records());
    if (o.json) std::printf("%s\n", summary_of(recs).dump(-1).c_str());
    log_info("reports written to {}", dir.string());
    return 0;
  }

  const bool need_essays =
      std::any_of(spec.tasks.begin(), spec.tasks.end(),
                  [](const std::string& t) { return eval::find_task(t)->info().needs_essays; });
  eval::TaskContext tc;
  if (need_essays) {
    auto path = eval::find_data_file("haystack/essays.txt", o.data_dir);
    if (!path) throw UserError(path.message());
    auto corpus = eval::EssayCorpus::load(*path);
    if (!corpus) throw UserError(corpus.message());
    tc.essays = *corpus;
  }
  const int32_t max_len = *std::max_element(spec.lengths.begin(), spec.lengths.end());
  if (!o.prompts_only) {
    std::ofstream log(runs_log(dir), std::ios::app);
    log << eval::utc_now_iso() << "  " << command_line(o) << "\n";
  }

  if (o.models.empty()) o.models.push_back("");
  if (o.prompts_only) fs::remove(dir / "prompts.jsonl", ec);  // the models of this run append
  std::vector<eval::SampleRecord> matrix_records;
  for (const std::string& m : o.models) {
    const std::string path = resolve_model(m, m.empty() || find_known_model(m));
    auto model = load_model(path);
    if (!model) throw UserError(model.message());
    const RopeScaling file_rope = (*model)->hp.rope_scaling;
    apply_rope_flags(o.rope, **model);
    const Model& mdl = **model;
    if (max_len > mdl.hp.n_ctx_max()) {
      log_warn("{}: context {} is beyond the {} tokens the model handles (see --rope-scaling yarn)",
               path, max_len, mdl.hp.n_ctx_max());
    }
    const eval::PromptEncoder enc(*mdl.tokenizer,
                                  o.chat ? eval::PromptFormat::chat : eval::PromptFormat::raw);
    if (o.chat) {  // a model without a usable chat template fails here, not mid-run
      const ChatMessage probe{"user", "x"};
      auto r = apply_chat_template(*mdl.tokenizer, std::span<const ChatMessage>(&probe, 1), true);
      if (!r) throw UserError(path + ": --chat: " + r.message());
    }
    if (o.prompts_only) {
      write_prompts(dir / "prompts.jsonl", spec, tc, enc, fs::path(path).filename().string());
      continue;
    }
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<eval::Runner_i> runner;
    eval::RunIdentity id;
    id.model = fs::path(path).filename().string();
    if (o.server.empty()) id.model += eval::rope_model_suffix(file_rope, mdl.hp);
    if (!o.server.empty()) {
      eval::ServerRunnerOptions so;
      so.url = o.server;
      so.model = o.server_model;
      so.timeout_s = o.timeout_s;
      so.send_policy = !o.no_sieve_field;
      auto r = eval::make_server_runner(so);
      if (!r) throw UserError(r.message());
      runner = std::move(*r);
      if (!o.server_model.empty()) id.model = o.server_model;
    } else if (o.backend == "cuda") {
      runner = make_gpu_eval_runner(mdl, max_len, o.concurrency);
    } else {
      pool = std::make_unique<ThreadPool>(o.threads > 0 ? o.threads : hardware_threads());
      eval::LocalRunnerOptions lo;
      lo.n_ctx = max_len;
      lo.n_batch = o.batch;
      lo.prefix_cache = !o.no_prefix_cache;
      runner = eval::make_local_runner(mdl, *pool, lo);
    }
    id.backend = runner->backend();

    const bool tty = isatty(2) && log_level() <= LogLevel::info;
    std::unique_ptr<Progress> bar;
    int64_t total = 0, already = 0, work_total = 0, work_done = 0, ran = 0;
    const auto t0 = std::chrono::steady_clock::now();
    eval::MatrixEvents ev;
    ev.planned = [&](int64_t t, int64_t d, int64_t w) {
      total = t;
      already = d;
      work_total = w;
      log_info("{}: {} samples ({} tasks x {} lengths x {} policies), {} already done, {} to run",
               id.model, t, spec.tasks.size(), spec.lengths.size(), spec.policies.size(), d, t - d);
      if (tty && t > d) bar = std::make_unique<Progress>("eval " + id.model, w);
    };
    ev.sample_done = [&](const eval::SampleRecord& r, int64_t w) {
      work_done += w;
      ++ran;
      if (bar) {
        bar->add(w);
        return;
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = work_done > 0 ? secs * static_cast<double>(work_total - work_done) /
                                             static_cast<double>(work_done)
                                       : 0;
      log_info("[{}/{}] {} {} score {:.2f} | {} tok, prefill {:.0f} tok/s | ETA {}", already + ran,
               total, r.id, r.policy, r.score, r.prompt_tokens,
               r.prefill_ms > 0 ? r.prefill_tokens * 1000.0 / r.prefill_ms : 0.0,
               fmt_duration(eta));
    };
    auto recs = eval::run_matrix(spec, id, tc, enc, *runner, *store, ev);
    if (bar) bar->done();
    if (!recs) throw UserError(recs.message());
    matrix_records.insert(matrix_records.end(), recs->begin(), recs->end());
  }

  if (o.prompts_only) return 0;
  write_reports(dir, store->records());
  if (o.json) {
    std::printf("%s\n", summary_of(matrix_records).dump(-1).c_str());
  } else {
    eval::ReportMeta meta;
    meta.title = "sieve eval";
    meta.command = command_line(o);
    std::fputs(eval::markdown_report(matrix_records, meta).c_str(), stdout);
  }
  log_info("samples: {}, reports: {}, {}, {}", (dir / "samples.jsonl").string(),
           (dir / "summary.md").string(), (dir / "summary.json").string(),
           (dir / "report.html").string());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  app.add_option("-m,--model", o->models,
                 "GGUF file or known model name; repeat for several (default: smollm2)")
      ->delimiter(',');
  app.add_option("-t,--threads", o->threads, "CPU threads (default: all)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--tasks", o->tasks,
                 "tasks or groups: all, ruler, ib, niah, or names (see --list-tasks)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--ctx,--lengths", o->lengths, "context lengths, e.g. 1K,2K,4K,8K")
      ->delimiter(',')
      ->capture_default_str();
  std::string policy_help =
      "attention policies to compare, each NAME or NAME:key=value:...; names:";
  for (std::string_view p : policy_presets()) policy_help += " " + std::string(p);
  app.add_option("--policy", o->policies, policy_help)->delimiter(',')->capture_default_str();
  std::string set_help =
      "policy knob key=value for every listed policy except dense (repeatable); knobs:";
  for (const KnobInfo& k : policy_knobs()) set_help += " " + std::string(k.name);
  app.add_option("--set", o->sets, set_help);
  app.add_option("--head-plan", o->head_plan,
                 "head plan of every rtpurbo policy (sieve calibrate --out)");
  app.add_option("-n,--samples", o->n, "samples per task and length")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--grid-n", o->grid_n, "niah grid: samples per depth and length")
      ->capture_default_str();
  app.add_option("--depths", o->depths, "niah grid depths in percent")->delimiter(',');
  app.add_option("--seed", o->seed, "generator seed (same seed, same samples)")
      ->capture_default_str();
  app.add_flag("--chat", o->chat,
               "wrap prompts in the model's chat template (default: raw completion)");
  app.add_option("-o,--out", o->out,
                 "output directory (samples.jsonl, summary.json/.md, report.html)")
      ->capture_default_str();
  app.add_flag("--json", o->json, "print the summary object(s) on stdout");
  add_rope_flags(app, o->rope);
  add_backend_flag(app, o->backend);
  app.add_option(
      "--server", o->server,
      "evaluate a running server at this URL via /v1/completions (-m gives the tokenizer)");
  app.add_option("--server-model", o->server_model, "\"model\" field sent to the server");
  app.add_flag("--no-sieve-field", o->no_sieve_field,
               "do not send the \"sieve\" policy object (servers that reject unknown fields; "
               "dense only)");
  app.add_option("--timeout", o->timeout_s, "server request timeout in seconds")
      ->check(CLI::Range(1.0, 1e6));
  app.add_flag("--report-only", o->report_only,
               "rebuild the reports from samples.jsonl without running");
  app.add_flag("--no-prefix-cache", o->no_prefix_cache, "recompute every prompt from scratch");
  app.add_flag("--stop-newline", o->stop_newline,
               "stop each answer at its first line break (faster on CPU; recorded, and kept apart "
               "in reports)");
  app.add_option("--batch", o->batch, "prefill chunk size")->check(CLI::Range(1, 65536));
  app.add_option("--concurrency", o->concurrency,
                 "--backend cuda: samples run at once through the engine (batched on the GPU; "
                 "fewer when their KV does not fit)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--data-dir", o->data_dir,
                 "directory holding haystack/essays.txt (default: the repository's data/)");
  app.add_flag("--list-tasks", o->list_tasks, "list the tasks and exit");
  app.add_flag(
      "--prompts-only", o->prompts_only,
      "write the fitted prompts to OUT/prompts.jsonl (to feed other engines) without running");
  return [o]() { return run(*o); };
}

SIEVE_COMMAND("eval", "long-context accuracy: RULER, InfiniteBench retrieval, NIAH grid; reports",
              setup);

}  // namespace
}  // namespace sieve::cli
