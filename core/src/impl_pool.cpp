// Per-thread free lists for TensorImpl and StorageImpl objects. See Note [Pooled impls].
#include <cstddef>
#include <cstdint>
#include <new>

#include "tessera/tensor.h"

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_POOL_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_POOL_OFF 1
#endif
#endif
#ifndef TESSERA_POOL_OFF
#define TESSERA_POOL_OFF 0
#endif

namespace tessera::detail {

// Note [Pooled impls]
// Every operator output is one TensorImpl and one StorageImpl, and most die a few calls later;
// glibc's malloc and free of the two took about a sixth of a dispatched call on 1-element tensors
// (docs/performance.md, dispatch overhead). Both classes allocate through impl_allocate, which
// keeps freed objects in a per-thread free list per 64-byte size class (up to kMaxBytes, at most
// kPerClass objects each, threaded through the objects themselves) and hands them out again. As
// in Note [Small CPU blocks] (allocator.cpp), an object freed on another thread joins that
// thread's lists; the lists are released when the thread exits, and an object freed after that
// goes straight to operator delete. Every block comes from operator new of its class size, so any
// of them may be returned to the C++ heap from anywhere. Under AddressSanitizer nothing is kept,
// so that a use after free of an impl is still found.
namespace {
constexpr size_t kStep = 64;
constexpr size_t kMaxBytes = 512;
constexpr size_t kClasses = kMaxBytes / kStep;
constexpr uint32_t kPerClass = 64;

size_t class_bytes(size_t n) { return (n + kStep - 1) & ~(kStep - 1); }

// Trivially constructed and destroyed, so that reading it is one initial-exec TLS load (Note [Hot
// thread-locals] in dispatch_key.cpp); ThreadExit releases it.
struct Lists {
  void* head[kClasses];
  uint32_t count[kClasses];
  void release() {
    for (void*& h : head)
      while (h) {
        void* next = *static_cast<void**>(h);
        ::operator delete(h);
        h = next;
      }
  }
};
enum : uint8_t { kUnused, kLive, kGone };
__attribute__((tls_model("initial-exec"))) thread_local Lists t_lists{};
__attribute__((tls_model("initial-exec"))) thread_local uint8_t t_state = kUnused;
struct ThreadExit {
  ~ThreadExit() {
    t_lists.release();
    t_state = kGone;
  }
};

Lists* thread_lists() {
  if (TESSERA_POOL_OFF) return nullptr;
  if (__builtin_expect(t_state == kLive, 1)) return &t_lists;
  if (t_state == kGone) return nullptr;
  static thread_local ThreadExit at_exit;  // first use on this thread: release at its exit
  (void)at_exit;
  t_state = kLive;
  return &t_lists;
}
}  // namespace

void* impl_allocate(size_t n) {
  const size_t bytes = class_bytes(n);
  if (bytes <= kMaxBytes) {
    if (Lists* l = thread_lists()) {
      const size_t c = bytes / kStep - 1;
      if (void* p = l->head[c]) {
        l->head[c] = *static_cast<void**>(p);
        --l->count[c];
        return p;
      }
    }
  }
  return ::operator new(bytes);
}

void impl_free(void* p, size_t n) noexcept {
  if (!p) return;
  const size_t bytes = class_bytes(n);
  if (bytes <= kMaxBytes) {
    if (Lists* l = thread_lists()) {
      const size_t c = bytes / kStep - 1;
      if (l->count[c] < kPerClass) {
        *static_cast<void**>(p) = l->head[c];
        l->head[c] = p;
        ++l->count[c];
        return;
      }
    }
  }
  ::operator delete(p);
}

}  // namespace tessera::detail
