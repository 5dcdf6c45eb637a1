#include "sparse/policy_builder.h"

#include <nlohmann/json.hpp>

namespace sieve {

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
