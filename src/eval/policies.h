// Attention policies as the harness uses them: a matrix compares several, each a
// make_policy() config (sparse/policy.h) named in records and reports by its label, sent to
// Sieve's server as the request's "sieve" object, and allowed a warm prefix cache only when
// that cannot change its results.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "sparse/policy.h"

namespace sieve::eval {

// `items` are NAME or NAME:key=value:key=value (knobs of that entry only, so that e.g. two
// budgets of one method run side by side); `sets` (key=value) go to every entry except
// dense, which selects nothing. Errors name the entry and list the valid names or knobs;
// sets with only dense listed, and two entries with one label, are errors too.
Result<std::vector<PolicyPtr>> make_policy_list(std::span<const std::string> items,
                                                std::span<const std::string> sets);

// Appends head_plan=PATH to every rtpurbo item (NAME or NAME:...); an error naming
// `list_flag` (the command's policy flag) when no rtpurbo item is listed.
Status attach_head_plan(std::vector<std::string>& items, const std::string& path,
                        const std::string& list_flag);

// The policy as a label: describe() ("tokenselect top_k=1024"), "dense" for nullptr.
std::string policy_label(const PolicyPtr& p);

// Whether a warm KV store may serve prompts under `p`: only when the policy leaves the KV of
// a prompt exactly as a cold run computes it (dense prefill, no eviction, not auto). A sparse
// prefill selects per chunk, and a prefix served from the cache moves the chunk boundaries.
bool policy_allows_prefix_reuse(const PolicyPtr& p);

// The request extension object of Sieve's server for a policy:
// {"policy": PRESET, knob: value, ...} with the knobs that differ from the preset's.
nlohmann::json policy_request_json(const PolicyConfig& p);

}  // namespace sieve::eval
