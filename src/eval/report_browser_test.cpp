// Opens the HTML report in headless Chromium and checks that every plot rendered: the
// report's inline check stamps <body> with how many plots and data marks got a layout box,
// and a screenshot must come out as a non-trivial PNG. Skipped when no Chromium is installed
// (Debian: apt-get install chromium); $SIEVE_CHROMIUM names another binary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "eval/records.h"
#include "eval/report.h"

namespace sieve::eval {
namespace {

namespace fs = std::filesystem;

std::string find_chromium() {
  if (const char* e = std::getenv("SIEVE_CHROMIUM"); e && *e) return e;
  for (const char* name :
       {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/snap/bin"}) {
      const fs::path p = fs::path(dir) / name;
      if (::access(p.c_str(), X_OK) == 0) return p.string();
    }
  }
  return "";
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ::pclose(f);
  return out;
}

int attr(const std::string& dom, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex(name + "=\"([0-9]+)\""))) return -1;
  return std::stoi(m[1]);
}

std::vector<SampleRecord> demo_records() {
  std::vector<SampleRecord> recs;
  for (const char* policy : {"dense", "demo"}) {
    for (int32_t ctx : {1024, 2048, 4096, 8192}) {
      for (const char* task : {"niah", "passkey", "vt"}) {
        for (int i = 0; i < 5; ++i) {
          SampleRecord r;
          r.model = "demo.gguf";
          r.backend = "local";
          r.format = "raw";
          r.policy = policy;
          r.task = task;
          r.suite = std::string(task) == "vt"     ? "ruler"
                    : std::string(task) == "niah" ? "niah"
                                                  : "infinitebench";
          r.ctx = ctx;
          r.index = i;
          r.id = std::string(task) + "/" + std::to_string(ctx) + "/" + std::to_string(i);
          r.target_depth = std::string(task) == "vt" ? -1 : 25.0 * i;
          r.depth = r.target_depth;
          r.answers = {"1234567"};
          r.output = "1234567";
          r.score = (ctx / 1024 + i) % 3 == 0 ? 0.0 : 1.0;
          r.prompt_tokens = r.prefill_tokens = ctx - 50;
          r.completion_tokens = 8;
          r.prefill_ms = ctx * (std::string(policy) == "dense" ? 1.0 : 0.5);
          r.decode_ms = 200;
          r.selected_fraction = std::string(policy) == "dense" ? 1.0 : 0.3;
          recs.push_back(r);
        }
      }
    }
  }
  return recs;
}

TEST(ReportBrowser, ChromiumRendersEveryPlot) {
  const std::string chromium = find_chromium();
  if (chromium.empty())
    GTEST_SKIP() << "no Chromium found (apt-get install chromium, or set SIEVE_CHROMIUM)";
  const fs::path dir =
      fs::temp_directory_path() / ("sieve_eval_browser_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "profile");
  const fs::path html = dir / "report.html";
  {
    std::ofstream out(html);
    out << html_report(demo_records(), ReportMeta{});
  }
  const std::string common = "'" + chromium +
                             "' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
                             "--no-first-run --user-data-dir='" +
                             (dir / "profile").string() + "' ";
  const std::string dom = run_capture("timeout 180 " + common + "--dump-dom 'file://" +
                                      html.string() + "' 2>/dev/null");
  if (dom.find("<body") == std::string::npos) {
    GTEST_SKIP() << "Chromium at " << chromium << " did not start headless (no DOM dump)";
  }
  // Plots: mean + 3 tasks + prefill + decode + selection = 7 line charts; heatmaps for the
  // two depth-swept tasks x two policies = 4.
  EXPECT_EQ(attr(dom, "data-plots-total"), 11) << dom.substr(0, 300);
  EXPECT_EQ(attr(dom, "data-plots-rendered"), attr(dom, "data-plots-total"));
  EXPECT_GT(attr(dom, "data-marks-total"), 100);
  EXPECT_EQ(attr(dom, "data-marks-rendered"), attr(dom, "data-marks-total"));

  const fs::path png = dir / "shot.png";
  run_capture("timeout 180 " + common + "--window-size=1400,2000 --screenshot='" + png.string() +
              "' 'file://" + html.string() + "' >/dev/null 2>&1");
  ASSERT_TRUE(fs::exists(png));
  std::ifstream in(png, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  EXPECT_EQ(std::string(sig + 1, 3), "PNG");
  // A blank page compresses to a few KB; coloured plots and text do not.
  EXPECT_GT(fs::file_size(png), 40000u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sieve::eval
