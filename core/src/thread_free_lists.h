// Internal to core/src: per-thread free lists of small blocks by 64-byte size class, shared by the
// caching CPU allocator and the TensorImpl/StorageImpl pool. See Note [Per-thread free lists].
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_KEEP_FREED_BLOCKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_KEEP_FREED_BLOCKS 0
#endif
#endif
#ifndef TESSERA_KEEP_FREED_BLOCKS
#define TESSERA_KEEP_FREED_BLOCKS 1
#endif

namespace tessera::detail {

// Note [Per-thread free lists]
// Every operator output is a data block, a TensorImpl and a StorageImpl, and most die a few calls
// later. The caching CPU allocator (Note [Small CPU blocks] in allocator.cpp) and the impl pool
// (Note [Pooled impls] in impl_pool.cpp) therefore keep freed blocks per thread and hand them out
// again without the C heap:
// - SizeClassFreeLists holds one list per 64-byte size class up to MaxBytes, at most PerClass
//   blocks per class, threaded through the blocks themselves; release() gives every block back
//   through FreeBlock.
// - PerThread<T> gives each thread one T and calls T::release() when the thread exits. A block
//   may be freed on another thread than the one that allocated it; it then joins the freeing
//   thread's lists, as in tcmalloc. Once a thread's lists are released, get() returns null on that
//   thread, so a block freed later (by another thread-local destructor) goes straight back to the
//   heap it came from.
// - T is trivially constructed and destroyed, so that the thread-local needs no guard and get() is
//   one initial-exec TLS load and a branch (Note [Hot thread-locals] in dispatch_key.cpp).
// - Under AddressSanitizer get() returns null: nothing is kept, so that a use after free of a
//   tensor's data or impl is still found.
template <size_t MaxBytes, uint32_t PerClass, void (*FreeBlock)(void*) noexcept>
struct SizeClassFreeLists {
  static constexpr size_t kStep = 64;
  static constexpr size_t kClasses = MaxBytes / kStep;
  static_assert(MaxBytes % kStep == 0 && kClasses > 0, "MaxBytes must be a positive multiple of 64");

  static constexpr size_t round_up(size_t n) { return (n + kStep - 1) & ~(kStep - 1); }

  void* head[kClasses];
  uint32_t count[kClasses];

  // `bytes` is a non-zero multiple of kStep. Null when the class's list is empty or bytes > MaxBytes.
  void* take(size_t bytes) {
    if (bytes > MaxBytes) return nullptr;
    const size_t c = bytes / kStep - 1;
    void* p = head[c];
    if (p) {
      head[c] = *static_cast<void**>(p);
      --count[c];
    }
    return p;
  }

  // False when the block is not kept (bytes > MaxBytes, or the class holds PerClass blocks): the
  // caller frees it.
  bool keep(void* p, size_t bytes) {
    if (bytes > MaxBytes) return false;
    const size_t c = bytes / kStep - 1;
    if (count[c] >= PerClass) return false;
    *static_cast<void**>(p) = head[c];
    head[c] = p;
    ++count[c];
    return true;
  }

  void release() {
    for (size_t c = 0; c < kClasses; ++c) {
      while (void* p = head[c]) {
        head[c] = *static_cast<void**>(p);
        FreeBlock(p);
      }
      count[c] = 0;
    }
  }
};

// One T per thread (see the Note above). T must be trivially constructible and destructible and
// have `void release()`. Instantiate it with a type private to one .cpp file, so that the
// thread-locals have internal linkage.
template <class T>
class PerThread {
 public:
  // This thread's T, or null under AddressSanitizer and after this thread released it.
  static T* get() {
    if constexpr (!TESSERA_KEEP_FREED_BLOCKS) {
      return nullptr;
    } else {
      if (__builtin_expect(state_ == kLive, 1)) return &value_;
      if (state_ == kGone) return nullptr;
      static thread_local Exit at_exit;  // first use on this thread: release at its exit
      (void)at_exit;
      state_ = kLive;
      return &value_;
    }
  }

 private:
  enum : uint8_t { kUnused, kLive, kGone };
  struct Exit {
    ~Exit() {
      value_.release();
      state_ = kGone;
    }
  };
  __attribute__((tls_model("initial-exec"))) static inline thread_local T value_{};
  __attribute__((tls_model("initial-exec"))) static inline thread_local uint8_t state_ = kUnused;
};

}  // namespace tessera::detail
