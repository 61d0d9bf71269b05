// `tessera doctor`: loads each plugin in a forked child, so that a plugin that crashes or hangs
// while loading is reported with its signal instead of taking the tool down.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"
#include "tessera/text_escape.h"

namespace {

const char* kDoctorUsage =
    "usage: tessera doctor [--timeout SECONDS]\n"
    "Loads every available plugin in its own child process, counts the devices of each backend,\n"
    "shuts it down, and prints one verdict per plugin: ok, FAILED (with the reason), CRASHED (with\n"
    "the signal), TIMED OUT or skipped (disabled or shadowed, with the reason). Exits 0 when it could\n"
    "examine every plugin, whatever the verdicts.\n"
    "  --timeout SECONDS   time allowed for one plugin (default 60, at most 86400); the check process\n"
    "                      and every process it started are killed when it runs out\n";

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += size_t(n);
  }
}

// In the child: load, report, shut down, report. Lines: "loaded <detail>", "failed <reason>", "shutdown".
[[noreturn]] void child_main(const tessera::PluginInfo& p, int fd) {
  std::string why;
  if (!tessera::load_plugin(p.name, &why)) {
    for (const auto& q : tessera::plugins())
      if (q.manifest == p.manifest && q.status == tessera::PluginStatus::Failed) why = q.reason;
    write_all(fd, "failed " + why + "\n");
    _exit(1);
  }
  std::string detail = "loads";
  if (p.has_device && p.kind == tessera::PluginKind::Backend) {
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

// Note [Doctor timeout]
// A plugin can block or ignore SIGALRM, and a process it forks inherits the report pipe, so neither
// an alarm in the child nor the end of the pipe bounds the wait. Each check process leads its own
// process group; the parent polls the pipe against a deadline and, once the check process has ended
// (seen with WNOWAIT, so that its id stays reserved) or the deadline has passed, kills the whole
// group with SIGKILL before reaping it. A plugin's helper that left the group (setsid) escapes this.
struct CheckResult {
  std::string report;
  int wstatus = 0;
  bool timed_out = false;
};

CheckResult wait_for_check(pid_t pid, int fd, unsigned timeout_s) {
  CheckResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  bool pipe_open = true;
  auto drain = [&] {
    char buf[4096];
    for (ssize_t n; pipe_open;) {
      n = ::read(fd, buf, sizeof(buf));
      if (n > 0) {
        if (r.report.size() < (size_t(1) << 20)) r.report.append(buf, size_t(n));
      } else if (n == 0) {
        pipe_open = false;
      } else if (errno != EINTR) {
        break;  // EAGAIN: nothing more for now
      }
    }
  };
  while (true) {
    siginfo_t info{};
    if (::waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      r.timed_out = true;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    if (pipe_open) {
      pollfd pfd{fd, POLLIN, 0};
      ::poll(&pfd, 1, int(std::min<long long>(left, 50)));
      drain();
    } else {
      ::usleep(useconds_t(std::min<long long>(left, 50)) * 1000);
    }
  }
  drain();
  ::kill(-pid, SIGKILL);
  while (::waitpid(pid, &r.wstatus, 0) < 0 && errno == EINTR) {
  }
  return r;
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
      const char* text = argv[++i];
      char* end = nullptr;
      errno = 0;
      unsigned long v = std::strtoul(text, &end, 10);
      if (!*text || *end || errno || text[0] == '-' || text[0] == '+' || v == 0 || v > 86400) {
        std::fprintf(stderr, "tessera doctor: --timeout '%s' is not a whole number of seconds from 1 to 86400\n",
                     text);
        return kCliUsage;
      }
      timeout = unsigned(v);
    } else {
      std::fprintf(stderr, "tessera doctor: unknown option '%s'\n\n%s", a.c_str(), kDoctorUsage);
      return kCliUsage;
    }
  }
  // Listing reads manifests only; nothing is loaded in this process.
  std::vector<tessera::PluginInfo> list = tessera::plugins();
  int ok = 0, failed = 0, crashed = 0, timed_out = 0, skipped = 0;
  for (const auto& p : list) {
    const std::string label = tessera::printable_text(p.name + (p.version.empty() ? "" : " " + p.version));
    if (p.status == tessera::PluginStatus::Disabled || p.status == tessera::PluginStatus::Shadowed) {
      std::printf("skipped  %s: %s\n", label.c_str(), tessera::printable_text(p.reason).c_str());
      ++skipped;
      continue;
    }
    if (p.status == tessera::PluginStatus::Failed) {
      std::printf("FAILED   %s: %s\n", label.c_str(), tessera::printable_text(p.reason).c_str());
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
      ::setpgid(0, 0);
      ::close(fds[0]);
      child_main(p, fds[1]);
    }
    ::setpgid(pid, pid);  // as well as in the child: whichever runs first (Note [Doctor timeout])
    ::close(fds[1]);
    CheckResult check = wait_for_check(pid, fds[0], timeout);
    ::close(fds[0]);
    const std::string& report = check.report;
    const int wstatus = check.wstatus;
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
    if (check.timed_out) {
      std::printf("TIMED OUT %s: %s: no verdict after %u s (--timeout); killed the check process and the "
                  "processes it started\n",
                  label.c_str(), loaded_line.empty() ? "while loading" : "while shutting down", timeout);
      ++timed_out;
    } else if (WIFSIGNALED(wstatus)) {
      int sig = WTERMSIG(wstatus);
      const char* when = loaded_line.empty() ? "while loading" : "while shutting down";
      std::printf("CRASHED  %s: %s: signal %d (%s)\n", label.c_str(), when, sig, strsignal(sig));
      ++crashed;
    } else if (loaded_line.empty() && failed_line.empty()) {
      std::printf("CRASHED  %s: while loading: the process exited with status %d before reporting (a sanitizer "
                  "report, or exit() called by the plugin)\n",
                  label.c_str(), WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
      ++crashed;
    } else if (!failed_line.empty()) {
      std::printf("FAILED   %s: %s\n", label.c_str(), tessera::printable_text(failed_line).c_str());
      ++failed;
    } else if (!loaded_line.empty() && shut_down && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
      std::printf("ok       %s: %s\n", label.c_str(), tessera::printable_text(loaded_line).c_str());
      ++ok;
    } else {
      std::printf("FAILED   %s: the check process exited with status %d\n", label.c_str(),
                  WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
      ++failed;
    }
  }
  std::printf("%zu plugin(s): %d ok, %d failed, %d crashed, %d timed out, %d skipped\n", list.size(), ok, failed,
              crashed, timed_out, skipped);
  return kCliOk;
}
