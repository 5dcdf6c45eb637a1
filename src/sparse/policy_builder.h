// One policy from every place a user can set its knobs, with one order of precedence for the
// CLI (--policy, --policy-file, --head-plan, --set), eval and bench lists (NAME:key=value items
// with --set) and the server (a request's "sieve" object over the server's --policy).
#pragma once

#include <string>
#include <vector>

#include "core/result.h"
#include "sparse/policy.h"

namespace sieve {

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
};

Result<PolicyConfig> build_policy(const PolicySources& s);

}  // namespace sieve
