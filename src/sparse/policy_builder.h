// One policy from every place a user can set its knobs, with one order of precedence for the
// CLI (--policy, --policy-file, --head-plan, --set), eval and bench lists (NAME:key=value items
// with --set) and the server (a request's "sieve" object over the server's --policy).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "sparse/policy.h"

namespace sieve {

// Head plans and sketch bases the operator registered at start (sieve serve --head-plan
// NAME=FILE, --sketch-basis NAME=FILE), loaded once. A server request names one of them; it
// never gives a path, so no request makes the server open a file.
struct PolicyFiles {
  std::map<std::string, std::shared_ptr<const HeadPlan>> head_plans;
  std::map<std::string, std::shared_ptr<const SketchBasis>> sketch_bases;
  // NAME=FILE, or FILE alone (named by the file name without its directory and extension).
  Status add_head_plan(std::string_view spec);
  Status add_sketch_basis(std::string_view spec);
};

// The name a plain FILE is registered under: its file name without directory and extension
// ("/x/plan.v2.json" -> "plan.v2"). A client that knows the file (sieve eval --server) sends
// this name.
std::string registered_file_name(std::string_view file);

// The sources of one policy. Knobs apply in this order, a later source overriding an earlier:
//   1. the preset: a request's "policy", else the policy file's, else `item`'s name, else
//      `base` (knobs adjust it), else auto; `item` and the file must not name different presets
//   2. the policy file's knobs
//   3. head_plan
//   4. sets, in order (skipped for a dense item when sets_skip_dense)
//   5. item's inline knobs (NAME:key=value:...)
//   6. the request's knobs
// Errors name the source: "--policy ITEM: ...", the file, "--set ...", or the request knob.
struct PolicySources {
  std::string item;  // NAME or NAME:key=value:... ("" = no item)
  const PolicyConfig* base =
      nullptr;                    // what a request without "policy" adjusts (the server's --policy)
  std::string file;               // a policy file (JSON or `key = value` lines)
  std::string head_plan;          // rtpurbo's head plan (an error for a policy without one)
  std::vector<std::string> sets;  // key=value assignments (--set)
  bool sets_skip_dense = false;   // eval/bench lists: --set tunes the sparse items only
  std::string request_json;       // a server request's "sieve" object ("" = none)
  // What the request's head_plan / sketch_basis knobs may name (nullptr: nothing; a request
  // knob is never read as a path).
  const PolicyFiles* files = nullptr;
};

Result<PolicyConfig> build_policy(const PolicySources& s);

}  // namespace sieve
