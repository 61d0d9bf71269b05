// `tessera doctor`: loads each plugin in a forked child, so that a plugin that crashes or hangs
// while loading is reported with its signal instead of taking the tool down.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"

namespace {

const char* kDoctorUsage =
    "usage: tessera doctor [--timeout SECONDS]\n"
    "Loads every available plugin in its own child process, counts the devices of each backend,\n"
    "shuts it down, and prints one verdict per plugin: ok, FAILED (with the reason), CRASHED (with\n"
    "the signal) or skipped (disabled or shadowed, with the reason). Exits 0 when it could examine\n"
    "every plugin, whatever the verdicts.\n"
    "  --timeout SECONDS   time allowed for one plugin (default 60)\n";

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += size_t(n);
  }
}

// In the child: load, report, shut down, report. Lines: "loaded <detail>", "failed <reason>", "shutdown".
[[noreturn]] void child_main(const tessera::PluginInfo& p, int fd, unsigned timeout) {
  alarm(timeout);
  std::string why;
  if (!tessera::load_plugin(p.name, &why)) {
    for (const auto& q : tessera::plugins())
      if (q.manifest == p.manifest && q.status == tessera::PluginStatus::Failed) why = q.reason;
    write_all(fd, "failed " + why + "\n");
    _exit(1);
  }
  std::string detail = "loads";
  if (p.has_device && p.kind == "backend") {
    const tessera::BackendDevice* b = tessera::backend_device_if_loaded(p.device_type);
    if (b && b->iface && b->iface->device_count) {
      char reason[512] = {0};
      int n = b->iface->device_count(b->self, reason, sizeof(reason));
      detail += "; device type '" + p.device_name + "': " + std::to_string(n) + " device(s)";
      if (n == 0 && reason[0]) detail += std::string(" (") + reason + ")";
    }
  }
  write_all(fd, "loaded " + detail + "\n");
  tessera::shutdown_plugins();
  write_all(fd, "shutdown\n");
  _exit(0);
}

}  // namespace

int tessera_cli_doctor(int argc, char** argv) {
  unsigned timeout = 60;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kDoctorUsage, stdout);
      return kCliOk;
    } else if (a == "--timeout" && i + 1 < argc) {
      timeout = unsigned(std::strtoul(argv[++i], nullptr, 10));
      if (timeout == 0) {
        std::fprintf(stderr, "tessera doctor: --timeout needs a positive number of seconds\n");
        return kCliUsage;
      }
    } else {
      std::fprintf(stderr, "tessera doctor: unknown option '%s'\n\n%s", a.c_str(), kDoctorUsage);
      return kCliUsage;
    }
  }
  // Listing reads manifests only; nothing is loaded in this process.
  std::vector<tessera::PluginInfo> list = tessera::plugins();
  int ok = 0, failed = 0, crashed = 0, skipped = 0;
  for (const auto& p : list) {
    const std::string label = p.name + (p.version.empty() ? "" : " " + p.version);
    if (p.status == tessera::PluginStatus::Disabled || p.status == tessera::PluginStatus::Shadowed) {
      std::printf("skipped  %s: %s\n", label.c_str(), p.reason.c_str());
      ++skipped;
      continue;
    }
    if (p.status == tessera::PluginStatus::Failed) {
      std::printf("FAILED   %s: %s\n", label.c_str(), p.reason.c_str());
      ++failed;
      continue;
    }
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror("tessera doctor: pipe");
      return kCliFailure;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("tessera doctor: fork");
      return kCliFailure;
    }
    if (pid == 0) {
      ::close(fds[0]);
      child_main(p, fds[1], timeout);
    }
    ::close(fds[1]);
    std::string report;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) != 0;) {
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      report.append(buf, size_t(n));
    }
    ::close(fds[0]);
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    std::string loaded_line, failed_line;
    bool shut_down = false;
    size_t start = 0;
    while (start < report.size()) {
      size_t end = report.find('\n', start);
      if (end == std::string::npos) end = report.size();
      std::string line = report.substr(start, end - start);
      if (line.rfind("loaded ", 0) == 0) loaded_line = line.substr(7);
      else if (line.rfind("failed ", 0) == 0) failed_line = line.substr(7);
      else if (line == "shutdown") shut_down = true;
      start = end + 1;
    }
    if (WIFSIGNALED(wstatus)) {
      int sig = WTERMSIG(wstatus);
      const char* when = loaded_line.empty() ? "while loading" : "while shutting down";
      std::printf("CRASHED  %s: %s: signal %d (%s)%s\n", label.c_str(), when, sig, strsignal(sig),
                  sig == SIGALRM ? " - timed out" : "");
      ++crashed;
    } else if (loaded_line.empty() && failed_line.empty()) {
      std::printf("CRASHED  %s: while loading: the process exited with status %d before reporting (a sanitizer "
                  "report, or exit() called by the plugin)\n",
                  label.c_str(), WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
      ++crashed;
    } else if (!failed_line.empty()) {
      std::printf("FAILED   %s: %s\n", label.c_str(), failed_line.c_str());
      ++failed;
    } else if (!loaded_line.empty() && shut_down && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
      std::printf("ok       %s: %s\n", label.c_str(), loaded_line.c_str());
      ++ok;
    } else {
      std::printf("FAILED   %s: the check process exited with status %d\n", label.c_str(),
                  WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
      ++failed;
    }
  }
  std::printf("%zu plugin(s): %d ok, %d failed, %d crashed, %d skipped\n", list.size(), ok, failed, crashed, skipped);
  return kCliOk;
}
