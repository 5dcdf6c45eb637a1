#include "sparse/policy_builder.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

namespace sieve {
namespace {

// NAME=FILE or FILE -> (name, file). A name is what a request sends: letters, digits, '-',
// '_' and '.'.
Result<std::pair<std::string, std::string>> split_named_file(std::string_view spec,
                                                             std::string_view flag) {
  std::string name, file;
  const size_t eq = spec.find('=');
  if (eq != std::string_view::npos && spec.substr(0, eq).find('/') == std::string_view::npos) {
    name = std::string(spec.substr(0, eq));
    file = std::string(spec.substr(eq + 1));
  } else {
    file = std::string(spec);
    name = registered_file_name(file);
  }
  if (file.empty()) return make_error("{} {}: expected NAME=FILE or FILE", flag, spec);
  if (name.empty() || name.size() > 64 || !std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      })) {
    return make_error("{} {}: the name must be 1-64 letters, digits, '-', '_' or '.'", flag, spec);
  }
  return std::make_pair(std::move(name), std::move(file));
}

template <class T>
Status add_named(std::map<std::string, std::shared_ptr<const T>>& into, std::string_view spec,
                 std::string_view flag, Result<T> (*load)(const std::string&)) {
  auto nf = split_named_file(spec, flag);
  if (!nf) return nf.error();
  if (into.count(nf->first)) return make_error("{}: the name {} is given twice", flag, nf->first);
  auto r = load(nf->second);
  if (!r) return make_error("{} {}: {}", flag, spec, r.message());
  into.emplace(nf->first, std::make_shared<const T>(std::move(r.value())));
  return {};
}

Result<HeadPlan> load_plan(const std::string& f) {
  return load_head_plan(f);
}

// A request's head_plan / sketch_basis: the name of a registered file ("" clears it).
template <class T>
Status set_registered(std::string_view knob, const nlohmann::json& v,
                      const std::map<std::string, std::shared_ptr<const T>>* registered,
                      std::string& name_out, std::shared_ptr<const T>& loaded) {
  if (!v.is_string()) return make_error("knob {} must be the name of a registered file", knob);
  const std::string name = v.get<std::string>();
  if (name.empty()) {
    name_out.clear();
    loaded.reset();
    return {};
  }
  if (registered) {
    if (const auto it = registered->find(name); it != registered->end()) {
      name_out = name;
      loaded = it->second;
      return {};
    }
  }
  std::string names;
  if (registered)
    for (const auto& [n, _] : *registered) names += (names.empty() ? "" : ", ") + n;
  if (names.empty()) {
    return make_error(
        "knob {}: this server has none registered (the operator registers them at start with "
        "{} NAME=FILE; a request names one, never a path)",
        knob, knob == "head_plan" ? "--head-plan" : "--sketch-basis");
  }
  return make_error(
      "knob {}: no registered file of that name; this server has: {} (a request names one, "
      "never a path)",
      knob, names);
}

}  // namespace

std::string registered_file_name(std::string_view file) {
  const size_t slash = file.rfind('/');
  std::string name(file.substr(slash == std::string_view::npos ? 0 : slash + 1));
  if (const size_t dot = name.rfind('.'); dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

Status PolicyFiles::add_head_plan(std::string_view spec) {
  return add_named(head_plans, spec, "--head-plan", &load_plan);
}

Status PolicyFiles::add_sketch_basis(std::string_view spec) {
  return add_named(sketch_bases, spec, "--sketch-basis", &load_sketch_basis);
}

Result<PolicyConfig> build_policy(const PolicySources& s) {
  const PolicyItem item = split_policy_item(s.item);
  nlohmann::json req;
  const bool has_req = !s.request_json.empty();
  if (has_req) {
    req = nlohmann::json::parse(s.request_json, nullptr, false);
    if (req.is_discarded()) return make_error("policy: not valid JSON");
    if (!req.is_object()) return make_error("policy: expected a JSON object of policy knobs");
  }
  // 1-2. the preset and the file's knobs
  Result<PolicyConfig> p = make_error("no policy");
  if (has_req && req.contains("policy")) {
    if (!req["policy"].is_string()) return make_error("policy: \"policy\" must be a string");
    p = make_policy(req["policy"].get<std::string>());
    if (!p) return make_error("policy: {}", p.message());
  } else if (!s.file.empty()) {
    p = load_policy_file(s.file);
    if (!p) return p.error();
    if (!item.name.empty() && item.name != "auto" && item.name != p->preset) {
      return make_error("--policy {} and the policy file's '{}' disagree; give one of them",
                        item.name, p->preset);
    }
  } else if (item.name.empty() && s.base) {
    p = *s.base;
  } else {
    p = make_policy(item.name.empty() ? "auto" : item.name);
    if (!p)
      return item.name.empty() ? p.error() : make_error("--policy {}: {}", s.item, p.message());
  }
  // 3. the head plan
  if (!s.head_plan.empty()) {
    if (!p->uses_head_plan()) {
      return make_error(
          "--head-plan is read by policy rtpurbo only (this run's policy is {}); add --policy "
          "rtpurbo",
          p->preset);
    }
    SIEVE_TRY(set_policy_knob(*p, "head_plan", s.head_plan));
  }
  // 4. --set
  if (!(s.sets_skip_dense && p->preset == "dense")) {
    for (const std::string& a : s.sets) {
      if (Status st = set_policy_knob(*p, a); !st) {
        // in a list (eval, bench) the item the --set failed on is named
        return s.sets_skip_dense ? make_error("--policy {}: {}", s.item, st.message()) : st.error();
      }
    }
  }
  // 5. the item's inline knobs
  for (const std::string& a : item.assignments) {
    if (Status st = set_policy_knob(*p, a); !st)
      return make_error("--policy {}: {}", s.item, st.message());
  }
  // 6. the request's knobs
  if (has_req) {
    for (auto it = req.begin(); it != req.end(); ++it) {
      if (it.key() == "policy") continue;
      if (it.key() == "head_plan") {
        SIEVE_TRY(set_registered("head_plan", it.value(), s.files ? &s.files->head_plans : nullptr,
                                 p->head_plan, p->plan));
        continue;
      }
      if (it.key() == "sketch_basis") {
        SIEVE_TRY(set_registered("sketch_basis", it.value(),
                                 s.files ? &s.files->sketch_bases : nullptr, p->sketch_basis,
                                 p->basis));
        continue;
      }
      std::string text;
      if (!policy_knob_text(it.value(), text)) {
        return make_error("knob {} must be a number, string, boolean or list of integers",
                          it.key());
      }
      SIEVE_TRY(set_policy_knob(*p, it.key(), text));
    }
  }
  SIEVE_TRY(check_policy_complete(*p));
  return p;
}

}  // namespace sieve
