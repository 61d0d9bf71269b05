// Note [Dispatch hot path]: a dispatched call allocates nothing on the heap beyond its output
// tensor. Counts operator new calls on this thread (replaced for the whole test program). The
// output's TensorImpl and StorageImpl come from per-thread free lists (Note [Pooled impls]), which
// take from operator new only until they hold enough objects, so each measured expression is
// first run a few times; after that an output costs no operator new at all, and anything the
// dispatcher itself allocated (a string, a vector) would show.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "tessera/ops.h"
#include "test_kernels.h"

// Sanitizers replace operator new themselves; the count is taken in plain builds only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TESSERA_COUNT_NEWS 0
#else
#define TESSERA_COUNT_NEWS 1
#endif

namespace {
thread_local int64_t t_news = 0;
}

#if TESSERA_COUNT_NEWS
void* operator new(size_t n) {
  ++t_news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  ++t_news;
  return std::malloc(n ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#endif

namespace tessera {
namespace {

TEST(HotPath, DispatchAllocatesOnlyTheOutput) {
  if (!TESSERA_COUNT_NEWS) GTEST_SKIP() << "operator new is the sanitizer's in this build";
  testing::setup_test_backends();
  Tensor a = full({4}, 1.0f), b = full({4}, 2.0f);
  for (int i = 0; i < 3; ++i) (void)add(a, b);  // warm up: function-local statics, first-use paths
  int64_t before = t_news;
  { Tensor e = empty({4}); }
  int64_t per_output = t_news - before;
  before = t_news;
  { Tensor r = add(a, b); }
  int64_t per_add = t_news - before;
  EXPECT_EQ(per_add, per_output) << "a dispatched add made " << per_add << " heap allocations, empty() makes "
                                 << per_output;
  Tensor a2 = full({1, 4}, 1.0f);
  for (int i = 0; i < 3; ++i) (void)a2.matmul(full({4, 3}, 1.0f));
  before = t_news;
  { Tensor r = a2.matmul(full({4, 3}, 1.0f)); }
  int64_t per_matmul = t_news - before;
  before = t_news;
  { Tensor o = full({4, 3}, 1.0f); }
  int64_t per_full = t_news - before;
  EXPECT_EQ(per_matmul, per_full + per_output);
}

}  // namespace
}  // namespace tessera
