#include "eval/records.h"

#include <ctime>
#include <fstream>

namespace sieve::eval {

using json = nlohmann::json;

std::string generator_tag() {
  return fmt::format("g{}", k_generator_version);
}

std::vector<SampleRecord> current_records(std::span<const SampleRecord> records, int64_t* skipped) {
  const std::string tag = generator_tag();
  std::vector<SampleRecord> out;
  int64_t n_skipped = 0;
  for (const SampleRecord& r : records) {
    const std::string_view v = r.data_version;
    if (v == tag || (v.size() > tag.size() && v.substr(0, tag.size() + 1) == tag + "-")) {
      out.push_back(r);
    } else {
      ++n_skipped;
    }
  }
  if (skipped) *skipped = n_skipped;
  return out;
}

std::string record_key(const SampleRecord& r) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{:016x}|{}|{}", r.model, r.backend, r.format, r.stop,
                     r.policy, r.task, r.ctx, r.index, r.seed,
                     r.target_depth < 0 ? std::string("-") : fmt::format("{}", r.target_depth),
                     r.data_version);
}

json to_json(const SampleRecord& r) {
  json j;
  j["id"] = r.id;
  j["model"] = r.model;
  j["backend"] = r.backend;
  j["format"] = r.format;
  j["stop"] = r.stop;
  j["policy"] = r.policy;
  j["suite"] = r.suite;
  j["task"] = r.task;
  j["ctx"] = r.ctx;
  j["index"] = r.index;
  j["seed"] = fmt::format("{:016x}", r.seed);  // hex: JSON numbers lose 64-bit precision
  j["data_version"] = r.data_version;
  j["metric"] = r.metric;
  j["target_depth"] = r.target_depth < 0 ? json(nullptr) : json(r.target_depth);
  j["depth"] = r.depth < 0 ? json(nullptr) : json(r.depth);
  j["units"] = r.units;
  j["pad"] = r.pad;
  j["prompt_tokens"] = r.prompt_tokens;
  j["max_new_tokens"] = r.max_new_tokens;
  j["prompt_hash"] = r.prompt_hash;
  j["answers"] = r.answers;
  j["output"] = r.output;
  j["score"] = r.score;
  j["prefill_tokens"] = r.prefill_tokens;
  j["reused_tokens"] = r.reused_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["prefill_ms"] = r.prefill_ms;
  j["decode_ms"] = r.decode_ms;
  j["selected_fraction"] = r.selected_fraction < 0 ? json(nullptr) : json(r.selected_fraction);
  j["mean_selected_tokens"] = r.mean_selected < 0 ? json(nullptr) : json(r.mean_selected);
  j["policy_ran"] = r.policy_ran;
  j["finished_at"] = r.finished_at;
  return j;
}

Result<SampleRecord> record_from_json(const json& j) {
  if (!j.is_object()) return make_error("a sample record must be a JSON object");
  SampleRecord r;
  try {
    r.id = j.at("id").get<std::string>();
    r.model = j.at("model").get<std::string>();
    r.backend = j.at("backend").get<std::string>();
    r.format = j.at("format").get<std::string>();
    r.stop = j.value("stop", "");
    r.policy = j.at("policy").get<std::string>();
    r.suite = j.value("suite", "");
    r.task = j.at("task").get<std::string>();
    r.ctx = j.at("ctx").get<int32_t>();
    r.index = j.at("index").get<int32_t>();
    r.seed = std::stoull(j.at("seed").get<std::string>(), nullptr, 16);
    r.data_version = j.at("data_version").get<std::string>();
    r.metric = j.value("metric", "");
    r.target_depth = j.contains("target_depth") && j["target_depth"].is_number()
                         ? j["target_depth"].get<double>()
                         : -1;
    r.depth = j.contains("depth") && j["depth"].is_number() ? j["depth"].get<double>() : -1;
    r.units = j.value("units", int64_t{0});
    r.pad = j.value("pad", int64_t{0});
    r.prompt_tokens = j.value("prompt_tokens", int64_t{0});
    r.max_new_tokens = j.value("max_new_tokens", 0);
    r.prompt_hash = j.value("prompt_hash", "");
    r.answers = j.at("answers").get<std::vector<std::string>>();
    r.output = j.at("output").get<std::string>();
    r.score = j.at("score").get<double>();
    r.prefill_tokens = j.value("prefill_tokens", int64_t{0});
    r.reused_tokens = j.value("reused_tokens", int64_t{0});
    r.completion_tokens = j.value("completion_tokens", int64_t{0});
    r.prefill_ms = j.value("prefill_ms", 0.0);
    r.decode_ms = j.value("decode_ms", 0.0);
    r.selected_fraction = j.contains("selected_fraction") && j["selected_fraction"].is_number()
                              ? j["selected_fraction"].get<double>()
                              : -1;
    r.mean_selected = j.contains("mean_selected_tokens") && j["mean_selected_tokens"].is_number()
                          ? j["mean_selected_tokens"].get<double>()
                          : -1;
    r.policy_ran = j.value("policy_ran", "");
    r.finished_at = j.value("finished_at", "");
  } catch (const std::exception& e) {
    return make_error("bad sample record: {}", e.what());
  }
  return r;
}

Result<std::unique_ptr<SampleStore>> SampleStore::open(const std::string& path) {
  auto s = std::make_unique<SampleStore>();
  s->path_ = path;
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      json j = json::parse(line, nullptr, false);
      auto r =
          j.is_discarded() ? Result<SampleRecord>(make_error("not JSON")) : record_from_json(j);
      if (!r) {
        ++s->bad_lines_;
        continue;
      }
      // A later line for the same key (a rerun) replaces the earlier one.
      const std::string key = record_key(*r);
      if (auto it = s->by_key_.find(key); it != s->by_key_.end()) {
        s->records_[it->second] = std::move(*r);
      } else {
        s->by_key_[key] = s->records_.size();
        s->records_.push_back(std::move(*r));
      }
    }
  }
  std::ofstream probe(path, std::ios::app);
  if (!probe) return make_error("cannot write the sample file {}", path);
  return s;
}

const SampleRecord* SampleStore::find(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &records_[it->second];
}

Status SampleStore::append(const SampleRecord& r) {
  std::ofstream out(path_, std::ios::app | std::ios::binary);
  if (!out) return make_error("cannot append to the sample file {}", path_);
  // A killed run can leave a last line without its newline; start on a fresh line then.
  {
    std::ifstream in(path_, std::ios::binary | std::ios::ate);
    if (in && in.tellg() > 0) {
      in.seekg(-1, std::ios::end);
      char c = 0;
      in.get(c);
      if (c != '\n') out << '\n';
    }
  }
  out << to_json(r).dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  out.flush();
  if (!out) return make_error("writing the sample file {} failed (disk full?)", path_);
  const std::string key = record_key(r);
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    records_[it->second] = r;
  } else {
    by_key_[key] = records_.size();
    records_.push_back(r);
  }
  return {};
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace sieve::eval
