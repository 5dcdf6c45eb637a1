#include "sparse/policy_builder.h"

#include <nlohmann/json.hpp>

namespace sieve {
namespace {

// A request knob's JSON value as the text set_policy_knob takes; empty optional: not a scalar.
bool knob_text(const nlohmann::json& v, std::string& out) {
  if (v.is_string())
    out = v.get<std::string>();
  else if (v.is_boolean())
    out = v.get<bool>() ? "true" : "false";
  else if (v.is_number_integer())
    out = std::to_string(v.get<int64_t>());
  else if (v.is_number())
    out = fmt::format("{:.17g}", v.get<double>());
  else if (v.is_array()) {  // a list knob (up_layers): [7, 11, 15]
    out.clear();
    for (const auto& e : v) {
      if (!e.is_number_integer()) return false;
      if (!out.empty()) out += ',';
      out += std::to_string(e.get<int64_t>());
    }
  } else {
    return false;
  }
  return true;
}

}  // namespace

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
      std::string text;
      if (!knob_text(it.value(), text)) {
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
