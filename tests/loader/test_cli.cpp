// The `tessera` command-line tool, run as a separate process against temporary plugin folders.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <vector>

#include "loader_test_util.h"

namespace {

using namespace lt;

struct CliRun {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
};

// Runs the built `tessera` with `args`; the environment is narrowed to `plugin_path` and lt_* plugins.
// Under a sanitizer, SIGSEGV is left to the default action so that `tessera doctor` sees the signal.
CliRun run_cli(const std::string& args, const std::string& plugin_path, bool merge_stderr = false,
               const std::string& env = "", const std::string& wrapper = "") {
  std::string cmd = env + " ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0\" "
                    "TSAN_OPTIONS=\"${TSAN_OPTIONS:+$TSAN_OPTIONS:}handle_segv=0\" TESSERA_PLUGIN_PATH='" +
                    plugin_path + "' TESSERA_PLUGINS_SELECT='lt_*' " + wrapper + " '" TESSERA_CLI "' " +
                    args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
  int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

class CliTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(CliTest, DevicesJsonListsTheTestPluginsDevice) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 1, "lt_cli_npu"));
  CliRun r = run_cli("devices --json", dir_.path());
  ASSERT_EQ(r.status, 0) << r.out;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON: " << r.out;
  ASSERT_TRUE(j.contains("devices") && j["devices"].is_array()) << r.out;
  bool found = false;
  for (const auto& d : j["devices"]) {
    if (d.value("name", "") != "lt_cli_npu:0") continue;
    found = true;
    EXPECT_EQ(d.value("type", ""), "lt_cli_npu");
    EXPECT_EQ(d.value("index", -1), 0);
    EXPECT_EQ(d.value("plugin", ""), "lt_good");
    ASSERT_TRUE(d["properties"].is_object()) << d.dump();
    EXPECT_EQ(d["properties"].value("name", ""), "host test device 0");
  }
  EXPECT_TRUE(found) << r.out;
}

TEST_F(CliTest, PluginsJsonListsStatusAndReason) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 1, "lt_cli_npu"));
  dir_.write("lt_broken.json", "[1, 2");
  CliRun r = run_cli("plugins --json", dir_.path());
  ASSERT_EQ(r.status, 0) << r.out;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_array()) << r.out;
  std::map<std::string, json> by_name;
  for (const auto& p : j) by_name[p.value("name", "")] = p;
  ASSERT_TRUE(by_name.count("lt_good") && by_name.count("lt_broken")) << r.out;
  EXPECT_EQ(by_name["lt_good"]["status"], "available");
  EXPECT_EQ(by_name["lt_good"]["kind"], "backend");
  EXPECT_EQ(by_name["lt_good"]["library"], LT_LIB_GOOD);
  EXPECT_EQ(by_name["lt_good"]["manifest"], dir_.file("lt_good.json"));
  EXPECT_EQ(by_name["lt_broken"]["status"], "failed");
  EXPECT_NE(by_name["lt_broken"]["reason"].get<std::string>().find("invalid JSON"), std::string::npos);
  for (const auto& p : j) {
    if (p.value("name", "").rfind("lt_", 0) != 0) {
      EXPECT_EQ(p["status"], "disabled") << p.dump();
    }
  }
}

// Whether `s` is well-formed UTF-8 without control characters other than '\n' (a naive decoder,
// independent of the one under test).
bool clean_terminal_text(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n' || (c >= 0x20 && c < 0x7f)) {
      ++i;
      continue;
    }
    int n = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || i + size_t(n) > s.size()) return false;
    uint32_t cp = c & (0x7f >> n);
    for (int k = 1; k < n; ++k) {
      unsigned char b = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((b & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < 0xa0 || (cp >= 0xd800 && cp < 0xe000) || cp > 0x10ffff) return false;
    i += size_t(n);
  }
  return true;
}

TEST_F(CliTest, PluginsListsEveryManifestWhateverBytesOneHolds) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 1, "lt_cli_npu"));
  json esc = backend_manifest("lt_esc", LT_LIB_GOOD, 2, "lt_escdev");
  esc["version"] = "1.0\x1b[2J\x1b]0;pwned\x07";
  esc["description"] = "C1 \xc2\x9b controls";
  dir_.write_manifest("lt_esc", esc);
  // A file name that is not UTF-8 and a manifest with raw bytes that are not UTF-8 either.
  dir_.write("lt_\xff\xfe.json", "{\"manifest_version\": 1, \"name\": \"lt_x\xc3\", \"version\": \"\xff\"}");
  dir_.write("lt_rawbytes.json", "{\"manifest_version\": 1, \"version\": \"\x1b[31m\xe2\x82\"}");
  CliRun j = run_cli("plugins --json", dir_.path());
  ASSERT_EQ(j.status, 0) << j.out;
  json list = json::parse(j.out, nullptr, false);
  ASSERT_TRUE(list.is_array()) << j.out;
  std::map<std::string, json> by_manifest;
  for (const auto& p : list) by_manifest[p.value("manifest", "")] = p;
  EXPECT_EQ(by_manifest[dir_.file("lt_good.json")].value("status", ""), "available") << j.out;
  EXPECT_EQ(by_manifest[dir_.file("lt_esc.json")].value("version", ""), "1.0\x1b[2J\x1b]0;pwned\x07") << j.out;
  EXPECT_EQ(by_manifest[dir_.file("lt_rawbytes.json")].value("status", ""), "failed") << j.out;
  EXPECT_EQ(by_manifest[dir_.file("lt_\xef\xbf\xbd\xef\xbf\xbd.json")].value("status", ""), "failed") << j.out;
  EXPECT_EQ(list.size(), 4u + size_t(std::count_if(list.begin(), list.end(), [](const json& p) {
                          return p.value("status", "") == "disabled";
                        })))
      << j.out;

  CliRun t = run_cli("plugins", dir_.path());
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_TRUE(clean_terminal_text(t.out)) << t.out;
  EXPECT_NE(t.out.find("1.0\\x1b[2J\\x1b]0;pwned\\x07"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("lt_\\xff\\xfe.json"), std::string::npos) << t.out;
  CliRun d = run_cli("doctor --timeout 10", dir_.path());
  EXPECT_TRUE(clean_terminal_text(d.out)) << d.out;
}

TEST_F(CliTest, MalformedVariablesGiveOneLineNamingThem) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 1, "lt_cli_npu"));
  CliRun d = run_cli("plugins", dir_.path(), true, "TESSERA_PLUGINS_DISABLE='cpu;cuda'");
  EXPECT_EQ(d.status, 1) << d.out;
  EXPECT_EQ(d.out,
            "tessera plugins: TESSERA_PLUGINS_DISABLE='cpu;cuda' has an invalid item 'cpu;cuda'; expected globs on "
            "plugin names (letters, digits, '_', '-', '.', and '*', '?', '[...]') separated by ','\n");
  // A bad TESSERA_LOG is reported once and ignored: the command still works.
  CliRun l = run_cli("plugins", dir_.path(), true, "TESSERA_LOG='plugins,Dispatch'");
  EXPECT_EQ(l.status, 0) << l.out;
  EXPECT_NE(l.out.find("[tessera:log] warning: TESSERA_LOG='plugins,Dispatch' has an invalid item 'Dispatch'; "
                       "expected component names"),
            std::string::npos)
      << l.out;
  EXPECT_NE(l.out.find("lt_good"), std::string::npos) << l.out;
  EXPECT_EQ(l.out.find("[tessera:plugins]"), std::string::npos) << "a refused TESSERA_LOG still enabled logging";
}

TEST_F(CliTest, HelpExitsZeroEverywhere) {
  for (const char* args : {"--help", "devices --help", "plugins --help", "doctor --help"}) {
    CliRun r = run_cli(args, dir_.path());
    EXPECT_EQ(r.status, 0) << args;
    EXPECT_NE(r.out.find("usage: tessera"), std::string::npos) << args << ": " << r.out;
  }
  CliRun v = run_cli("--version", dir_.path());
  EXPECT_EQ(v.status, 0);
  EXPECT_EQ(v.out.rfind("tessera ", 0), 0u) << v.out;
}

TEST_F(CliTest, BadUsageExitsTwo) {
  for (const char* args : {"", "frobnicate", "devices --bogus", "plugins extra", "doctor --timeout"}) {
    CliRun r = run_cli(args, dir_.path(), true);
    EXPECT_EQ(r.status, 2) << "'" << args << "': " << r.out;
  }
}

TEST_F(CliTest, DoctorReportsACrashingPluginWithItsSignal) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 1, "lt_cli_npu"));
  json crash = backend_manifest("lt_crash", LT_LIB_CRASH, 2, "lt_crashdev");
  dir_.write_manifest("lt_crash", crash);
  dir_.write_manifest("lt_no_entry", backend_manifest("lt_no_entry", LT_LIB_NO_ENTRY, 3, "lt_noentrydev"));
  CliRun r = run_cli("doctor", dir_.path());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("CRASHED  lt_crash 1.0.0: while loading: signal 11"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok       lt_good 1.0.0: loads; device type 'lt_cli_npu': 1 device(s)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("FAILED   lt_no_entry"), std::string::npos) << r.out;
}

// Whether `pid` is still a running process (a zombie counts as gone: it runs nothing).
bool process_alive(int pid) {
  if (::kill(pid, 0) != 0) return errno != ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
}

TEST_F(CliTest, DoctorTimeoutKillsPluginsThatBlockSigalrmOrForkAChild) {
  dir_.write_manifest("lt_good", backend_manifest("lt_good", LT_LIB_GOOD, 1, "lt_cli_npu"));
  dir_.write_manifest("lt_hang_sigalrm", backend_manifest("lt_hang_sigalrm", LT_LIB_HANG_SIGALRM, 2, "lt_hangdev"));
  dir_.write_manifest("lt_fork_child", backend_manifest("lt_fork_child", LT_LIB_FORK_CHILD, 3, "lt_forkdev"));
  const std::string pid_file = dir_.file("pids.txt");
  const auto t0 = std::chrono::steady_clock::now();
  // The outer `timeout` only keeps a regression from hanging the suite.
  CliRun r = run_cli("doctor --timeout 1", dir_.path(), false, "LT_PID_FILE='" + pid_file + "'",
                     "timeout -s KILL 30");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_LT(seconds, 2 * 1 + 10.0) << r.out;
  EXPECT_NE(r.out.find("TIMED OUT lt_hang_sigalrm 1.0.0: while loading: no verdict after 1 s"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("TIMED OUT lt_fork_child 1.0.0: while loading: no verdict after 1 s"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("ok       lt_good 1.0.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 timed out"), std::string::npos) << r.out;
  std::ifstream in(pid_file);
  std::vector<int> pids;
  for (int pid; in >> pid;) pids.push_back(pid);
  EXPECT_EQ(pids.size(), 3u) << "the plugins did not run as expected";
  for (int pid : pids) {
    bool alive = process_alive(pid);
    for (int i = 0; i < 50 && alive; ++i) {  // SIGKILL is delivered asynchronously
      ::usleep(20000);
      alive = process_alive(pid);
    }
    EXPECT_FALSE(alive) << "process " << pid << " started by a plugin outlived `tessera doctor`";
    if (alive) ::kill(pid, SIGKILL);
  }
}

}  // namespace
