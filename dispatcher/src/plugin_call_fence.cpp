// The call fence: every path into plugin code holds a PluginCallGuard (Note [In-flight plugin
// calls] in host_api.h); an unload first drains the calls in flight. The slots of the calling
// threads and the heavy half of Note [Asymmetric fence] live here.
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "plugin_registry.h"
#include "tessera/error.h"

namespace tessera {
namespace {

// Note [Asymmetric fence] (host_api.h): the slots of every thread that ever made a call.
std::atomic<PluginCallSlot*> g_plugin_call_slots{nullptr};

long membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

#if defined(__SANITIZE_THREAD__)
constexpr bool kUseMembarrier = false;  // ThreadSanitizer does not model membarrier
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kUseMembarrier = false;
#else
constexpr bool kUseMembarrier = true;
#endif
#else
constexpr bool kUseMembarrier = true;
#endif

// Registers the process for expedited membarrier before main (and so before any call) when the
// kernel offers it; callers then pay a compiler barrier instead of a fence.
[[maybe_unused]] const bool g_membarrier_registered = [] {
  if (!kUseMembarrier) return false;
  long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
  if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) return false;
  g_heavy_fence_ready.store(true, std::memory_order_release);
  return true;
}();

// Makes every store a running thread of this process did before its last compiler barrier
// visible to the loads that follow (the heavy half of Note [Asymmetric fence]).
void heavy_fence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g_heavy_fence_ready.load(std::memory_order_acquire))
    TESSERA_INTERNAL_ASSERT(membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0,
                            "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after registering");
}

uint64_t plugin_calls_in_flight() {
  uint64_t n = 0;
  for (PluginCallSlot* s = g_plugin_call_slots.load(std::memory_order_acquire); s; s = s->next)
    n += s->depth.load(std::memory_order_acquire);
  return n;
}

}  // namespace

PluginCallSlot* claim_plugin_call_slot() {
  // Released when the thread exits. A thread that calls again after its release (from another
  // thread_local's destructor) gets a slot of its own that is never released.
  struct Release {
    PluginCallSlot* slot = nullptr;
    ~Release() {
      if (!slot) return;
      t_plugin_call_slot = nullptr;
      slot->in_use.store(false, std::memory_order_release);
    }
  };
  static thread_local bool released_once = false;
  PluginCallSlot* slot = nullptr;
  for (PluginCallSlot* s = g_plugin_call_slots.load(std::memory_order_acquire); s && !slot; s = s->next) {
    bool free = false;
    if (s->in_use.compare_exchange_strong(free, true, std::memory_order_acq_rel)) slot = s;
  }
  if (!slot) {
    slot = new PluginCallSlot;  // never freed: shutdown may scan it at any time
    slot->in_use.store(true, std::memory_order_relaxed);
    PluginCallSlot* head = g_plugin_call_slots.load(std::memory_order_relaxed);
    do slot->next = head;
    while (!g_plugin_call_slots.compare_exchange_weak(head, slot, std::memory_order_release, std::memory_order_relaxed));
  }
  t_plugin_call_slot = slot;
  if (!released_once) {
    static thread_local struct Owner : Release {
      ~Owner() { released_once = true; }
    } owner;
    owner.slot = slot;
  }
  return slot;
}

void throw_plugin_shutdown_in_progress() {
  detail::throw_error(ErrorCode::Unavailable,
                      "plugins are being shut down (shutdown_plugins() is running on another thread); "
                      "start new operator calls after it returns");
}

namespace loader {

void drain_and(void (*fn)(Registry& reg)) {
  TESSERA_CHECK_CODE(t_plugin_call_depth == 0, ErrorCode::InvalidArgument,
                     "shutdown_plugins() called from inside an operator call or a plugin callback (it would wait "
                     "for itself); call it once the calls have returned");
  static std::mutex one_shutdown_at_a_time;
  std::lock_guard serial(one_shutdown_at_a_time);
  g_plugin_shutdown.store(true, std::memory_order_seq_cst);
  struct ClearFlag {
    ~ClearFlag() { g_plugin_shutdown.store(false, std::memory_order_seq_cst); }
  } clear_flag;
  heavy_fence();
  constexpr auto kShutdownWait = std::chrono::seconds(30);
  const auto deadline = std::chrono::steady_clock::now() + kShutdownWait;
  for (;;) {
    uint64_t in_flight = plugin_calls_in_flight();
    if (in_flight == 0) break;
    TESSERA_CHECK_CODE(std::chrono::steady_clock::now() < deadline, ErrorCode::Unavailable,
                       "shutdown_plugins(): ", in_flight, " operator call(s) still running after ",
                       kShutdownWait.count(), " s; plugins stay loaded; let the calls finish and call it again");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  fn(reg);
}

}  // namespace loader
}  // namespace tessera
