// Note [Machine load estimate] in machine_load.h.
#include "machine_load.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <limits>

namespace tessera::cpu {

namespace {

bool add_checked(uint64_t* sum, uint64_t v) { return !__builtin_add_overflow(*sum, v, sum); }

int64_t ticks_per_second() {
  static const int64_t hz = sysconf(_SC_CLK_TCK);
  return hz;
}

}  // namespace

std::optional<CpuTicks> parse_proc_stat(std::string_view text) {
  if (text.substr(0, 4) != "cpu ") return std::nullopt;
  text.remove_prefix(4);
  text = text.substr(0, text.find('\n'));
  // user nice system idle iowait irq softirq steal guest guest_nice; guest time is part of user.
  uint64_t field[8] = {};
  int fields = 0;
  while (fields < 8) {
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    if (text.empty()) break;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), field[fields]);
    if (ec != std::errc() || (end != text.data() + text.size() && *end != ' ')) return std::nullopt;
    text.remove_prefix(size_t(end - text.data()));
    ++fields;
  }
  if (fields < 4) return std::nullopt;
  enum { kUser, kNice, kSystem, kIdle, kIowait, kIrq, kSoftirq, kSteal };
  CpuTicks t;
  for (const int f : {kUser, kNice, kSystem, kIrq, kSoftirq, kSteal})
    if (!add_checked(&t.busy, field[f])) return std::nullopt;
  t.total = t.busy;
  if (!add_checked(&t.total, field[kIdle]) || !add_checked(&t.total, field[kIowait])) return std::nullopt;
  return t;
}

std::optional<double> others_cpus(const LoadSample& before, const LoadSample& after,
                                  int64_t ticks_per_second) {
  if (ticks_per_second < 1 || after.wall_ns <= before.wall_ns || after.cpu.busy < before.cpu.busy ||
      after.cpu.total < before.cpu.total || after.process_cpu_ns < before.process_cpu_ns)
    return std::nullopt;
  const double busy_ns = double(after.cpu.busy - before.cpu.busy) * 1e9 / double(ticks_per_second);
  const double own_ns = double(after.process_cpu_ns - before.process_cpu_ns);
  return (busy_ns - own_ns) / double(after.wall_ns - before.wall_ns);
}

MachineLoad classify_load(const LoadSample& before, const LoadSample& after, int64_t ticks_per_second) {
  const std::optional<double> others = others_cpus(before, after, ticks_per_second);
  return others && *others < kQuietOthersCpus ? MachineLoad::Quiet : MachineLoad::Loaded;
}

std::optional<LoadSample> sample_load() {
  // The aggregate line comes first and is at most about 230 characters.
  char buf[512];
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  const std::optional<CpuTicks> cpu = parse_proc_stat(std::string_view(buf, size_t(n)));
  if (!cpu) return std::nullopt;
  LoadSample s;
  s.cpu = *cpu;
  s.process_cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  s.wall_ns = clock_ns(CLOCK_MONOTONIC);
  if (s.process_cpu_ns < 0 || s.wall_ns < 0) return std::nullopt;
  return s;
}

void MachineLoadEstimate::refresh(int64_t now_coarse_ns) {
  if (refreshing_.test_and_set(std::memory_order_acquire)) return;
  // Another thread may have refreshed between this thread's check and the lock.
  if (now_coarse_ns >= next_refresh_ns_.load(std::memory_order_relaxed)) {
    const std::optional<LoadSample> s = sample_load();
    if (!s) {
      quiet_.store(false, std::memory_order_relaxed);
      next_refresh_ns_.store(std::numeric_limits<int64_t>::max(), std::memory_order_relaxed);
    } else {
      if (have_last_)
        quiet_.store(classify_load(last_, *s, ticks_per_second()) == MachineLoad::Quiet,
                     std::memory_order_relaxed);
      last_ = *s;
      have_last_ = true;
      next_refresh_ns_.store(now_coarse_ns + kLoadRefreshNs, std::memory_order_relaxed);
    }
  }
  refreshing_.clear(std::memory_order_release);
}

MachineLoadEstimate& machine_load() {
  static constinit MachineLoadEstimate estimate;
  return estimate;
}

}  // namespace tessera::cpu
