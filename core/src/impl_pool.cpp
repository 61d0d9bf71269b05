// Per-thread free lists for TensorImpl and StorageImpl objects. See Note [Pooled impls].
#include <cstddef>
#include <cstdint>
#include <new>

#include "tessera/tensor.h"
#include "thread_free_lists.h"

namespace tessera::detail {

// Note [Pooled impls]
// Every operator output is one TensorImpl and one StorageImpl, and most die a few calls later;
// glibc's malloc and free of the two took about a sixth of a dispatched call on 1-element tensors
// (docs/performance.md, dispatch overhead). Both classes allocate through impl_allocate, which
// keeps freed objects in per-thread free lists (Note [Per-thread free lists] in
// thread_free_lists.h: 64-byte size classes up to kMaxBytes, at most kPerClass objects each) and
// hands them out again. Every block comes from operator new of its class size, so any of them may
// be returned to the C++ heap from anywhere.
namespace {
constexpr size_t kMaxBytes = 512;
constexpr uint32_t kPerClass = 64;

void delete_block(void* p) noexcept { ::operator delete(p); }

using ImplLists = SizeClassFreeLists<kMaxBytes, kPerClass, delete_block>;
using Pool = PerThread<ImplLists>;
}  // namespace

void* impl_allocate(size_t n) {
  const size_t bytes = ImplLists::round_up(n);
  if (bytes <= kMaxBytes)
    if (ImplLists* l = Pool::get())
      if (void* p = l->take(bytes)) return p;
  return ::operator new(bytes);
}

void impl_free(void* p, size_t n) noexcept {
  if (!p) return;
  const size_t bytes = ImplLists::round_up(n);
  if (bytes <= kMaxBytes)
    if (ImplLists* l = Pool::get())
      if (l->keep(p, bytes)) return;
  ::operator delete(p);
}

}  // namespace tessera::detail
