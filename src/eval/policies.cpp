#include "eval/policies.h"

#include "sparse/policy_builder.h"

#include <cmath>
#include <cstdlib>

namespace sieve::eval {

using json = nlohmann::json;

namespace {

// A knob value of PolicyConfig::describe() as JSON: booleans and numbers typed, names as
// strings (the server's parser takes either).
json knob_value(const std::string& v) {
  if (v == "true") return true;
  if (v == "false") return false;
  if (!v.empty()) {
    char* end = nullptr;
    const long long i = std::strtoll(v.c_str(), &end, 10);
    if (*end == '\0') return i;
    const double d = std::strtod(v.c_str(), &end);
    if (*end == '\0' && std::isfinite(d)) return d;
  }
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

}  // namespace

Status attach_head_plan(std::vector<std::string>& items, const std::string& path,
                        const std::string& list_flag) {
  bool any = false;
  for (std::string& it : items) {
    if (it == "rtpurbo" || it.rfind("rtpurbo:", 0) == 0) {
      it += ":head_plan=" + path;
      any = true;
    }
  }
  if (!any)
    return make_error("--head-plan is read by policy rtpurbo only; list it (e.g. {} dense,rtpurbo)",
                      list_flag);
  return {};
}

Result<std::vector<PolicyPtr>> make_policy_list(std::span<const std::string> items,
                                                std::span<const std::string> sets) {
  if (items.empty()) return make_error("no policies; give --policy (e.g. dense)");
  std::vector<PolicyPtr> out;
  bool any_sparse = false;
  for (const std::string& item : items) {
    if (split_policy_item(item).name != "dense") any_sparse = true;
    PolicySources src;
    src.item = item;
    src.sets.assign(sets.begin(), sets.end());
    src.sets_skip_dense = true;
    auto p = build_policy(src);
    if (!p) return p.error();
    PolicyPtr ptr = std::make_shared<const PolicyConfig>(std::move(*p));
    for (const PolicyPtr& q : out) {
      if (q->describe() == ptr->describe())
        return make_error("--policy {}: policy '{}' is listed twice", item, ptr->describe());
    }
    out.push_back(std::move(ptr));
  }
  if (!sets.empty() && !any_sparse) {
    return make_error(
        "--set {}: dense has no knobs; list a sparse policy too (e.g. --policy dense,tokenselect)",
        sets.front());
  }
  return out;
}

std::string policy_label(const PolicyPtr& p) {
  return p ? p->describe() : std::string("dense");
}

bool policy_allows_prefix_reuse(const PolicyPtr& p) {
  return !p || (p->prefill == PrefillMode::dense && !p->evicts() && !is_auto(*p));
}

json policy_request_json(const PolicyConfig& p) {
  // describe() is "preset key=value ...", listing exactly the knobs that differ from the
  // preset; values never contain spaces.
  json j = json::object();
  const std::vector<std::string> items = split(p.describe(), ' ');
  j["policy"] = items.front();
  for (size_t i = 1; i < items.size(); ++i) {
    const size_t eq = items[i].find('=');
    if (eq == std::string::npos) continue;
    const std::string key = items[i].substr(0, eq), value = items[i].substr(eq + 1);
    // A server never opens a path a request names: it serves the files its operator
    // registered, a plain FILE under its file name (sieve serve --head-plan FILE).
    j[key] = key == "head_plan" || key == "sketch_basis" ? json(registered_file_name(value))
                                                         : knob_value(value);
  }
  return j;
}

}  // namespace sieve::eval
