#include "eval/haystack.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/eval_rng.h"

namespace sieve::eval {
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> data_dirs(std::string_view dir_override) {
  std::vector<fs::path> dirs;
  if (!dir_override.empty()) {
    dirs.emplace_back(dir_override);
    return dirs;  // an explicit directory is the only place to look
  }
  if (const char* d = std::getenv("SIEVE_DATA_DIR"); d && *d) dirs.emplace_back(d);
#ifdef SIEVE_SOURCE_DATA_DIR
  dirs.emplace_back(SIEVE_SOURCE_DATA_DIR);  // the source tree this binary was built from
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    dirs.push_back(exe.parent_path().parent_path() / "share" / "sieve" / "data");
    dirs.push_back(exe.parent_path() / "data");
  }
  return dirs;
}

}  // namespace

Result<std::string> find_data_file(std::string_view relative, std::string_view dir_override) {
  std::string tried;
  for (const fs::path& dir : data_dirs(dir_override)) {
    const fs::path p = dir / relative;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
    tried += (tried.empty() ? "" : ", ") + p.string();
  }
  return make_error(
      "data file {} not found (looked in: {}); point --data-dir or SIEVE_DATA_DIR at the "
      "repository's data/ directory",
      relative, tried.empty() ? "nowhere" : tried);
}

Result<std::shared_ptr<const EssayCorpus>> EssayCorpus::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read the essay corpus {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = from_text(ss.str());
  if (c->words().empty()) return make_error("the essay corpus {} has no words", path);
  return c;
}

std::shared_ptr<const EssayCorpus> EssayCorpus::from_text(std::string_view text) {
  auto c = std::make_shared<EssayCorpus>();
  std::istringstream in{std::string(text)};
  std::string w;
  uint64_t h = fnv1a64("");
  while (in >> w) {
    h = fnv1a64(w, h);
    h = fnv1a64(" ", h);
    c->words_.push_back(std::move(w));
  }
  c->fingerprint_ = h;
  return c;
}

std::string EssayCorpus::first_words(int64_t n, int64_t pad_chars) const {
  std::string out;
  if (words_.empty()) return out;
  for (int64_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += words_[static_cast<size_t>(i) % words_.size()];
  }
  if (pad_chars > 0) {
    const std::string& next = words_[static_cast<size_t>(n) % words_.size()];
    size_t letters = 0;
    while (letters < next.size() && std::isalpha(static_cast<unsigned char>(next[letters])))
      ++letters;
    const size_t take = std::min(letters, static_cast<size_t>(pad_chars));
    if (take > 0) {
      if (n > 0) out += ' ';
      out.append(next, 0, take);
    }
  }
  return out;
}

std::vector<std::string> split_sentences(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  const auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  const auto is_close = [](char c) { return c == '"' || c == '\'' || c == ')' || c == ']'; };
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '.' || c == '!' || c == '?') {
      size_t j = i + 1;
      while (j < text.size() && is_close(text[j])) ++j;
      if (j == text.size() || is_space(text[j])) {
        out.emplace_back(text.substr(start, j - start));
        while (j < text.size() && is_space(text[j])) ++j;
        start = j;
        i = j;
        continue;
      }
    }
    ++i;
  }
  // Leading whitespace is skipped above only after a sentence end; trim the first one too.
  while (start < text.size() && is_space(text[start])) ++start;
  if (start < text.size()) out.emplace_back(text.substr(start));
  for (std::string& s : out) {
    size_t b = 0;
    while (b < s.size() && is_space(s[b])) ++b;
    s.erase(0, b);
  }
  std::erase_if(out, [](const std::string& s) { return s.empty(); });
  return out;
}

}  // namespace sieve::eval
