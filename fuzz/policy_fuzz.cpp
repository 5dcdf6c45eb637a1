// libFuzzer target for sparse-attention policy strings and policy files
// (src/sparse/policy.cpp, policy_builder.cpp): --policy NAME:key=value:... items, --set
// assignments, a server request's "sieve" object and policy files (JSON or key = value
// lines), all through build_policy as the CLI and the server call it. The first byte picks the
// form. A policy that builds must describe itself and resolve for any prompt length.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "sparse/policy_builder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sieve::fuzz::Input in(data, size);
  const uint8_t mode = in.byte();
  const std::string_view rest = in.rest();
  // head_plan / sketch_basis knobs load files by path: keep them off device and proc files.
  if (sieve::fuzz::names_special_file(rest)) return 0;
  static const sieve::PolicyConfig base = *sieve::make_policy("auto");
  sieve::PolicySources src;
  switch (mode % 4) {
    case 0: {  // --policy ITEM [--set ...] (the sets after the first newline)
      sieve::fuzz::Input lines(reinterpret_cast<const uint8_t*>(rest.data()), rest.size());
      src.item = std::string(lines.until('\n'));
      while (lines.size() > 0 && src.sets.size() < 16) src.sets.emplace_back(lines.until('\n'));
      src.sets_skip_dense = mode & 4;
      break;
    }
    case 1:  // a request's "sieve" object over the server's policy
      src.base = &base;
      src.request_json = std::string(rest);
      break;
    case 2:  // --policy-file
      src.file = sieve::fuzz::scratch_file(rest);
      break;
    default: {  // split_policy_item + make_policy directly
      const sieve::PolicyItem item = sieve::split_policy_item(rest);
      auto p = sieve::make_policy(item.name, item.assignments);
      if (!p) {
        sieve::fuzz::check_message(p.message());
        return 0;
      }
      (void)p->describe();
      return 0;
    }
  }
  auto p = sieve::build_policy(src);
  if (!p) {
    sieve::fuzz::check_message(p.message());
    return 0;
  }
  volatile size_t sink = p->describe().size();
  (void)sieve::check_policy_complete(*p);
  for (int64_t n : {int64_t{0}, int64_t{1}, sieve::auto_min_prompt(), int64_t{1} << 40})
    sink = sink + sieve::resolve_auto(*p, n).describe().size();
  (void)sink;
  return 0;
}
