// The SDK's stream-ordered frees (Note [Stream-ordered allocation] in
// tessera/stream_ordered_frees.hpp) on their own: which frees wait, for which streams, and what
// collect / drain / abandon hand back. Events are completed by the test, standing for the work
// queued on each stream; the CUDA and OpenCL allocators' own tests run the helper inside them.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tessera/stream_ordered_frees.hpp"

namespace {

using tessera::sdk::StreamEventOps;
using tessera::sdk::StreamOrderedFrees;

struct Work {
  struct Ev {
    int device;
    void* stream;
    bool done = false;
  };
  std::vector<Ev*> live;
  int recorded = 0, waited = 0, destroyed = 0;

  StreamEventOps ops() {
    StreamEventOps o;
    o.ctx = this;
    o.record = [](void* ctx, int device, void* stream) -> void* {
      auto* w = static_cast<Work*>(ctx);
      ++w->recorded;
      w->live.push_back(new Ev{device, stream});
      return w->live.back();
    };
    o.query = [](void*, int, void* ev) { return static_cast<Ev*>(ev)->done; };
    o.synchronize = [](void* ctx, int, void* ev) {
      ++static_cast<Work*>(ctx)->waited;
      static_cast<Ev*>(ev)->done = true;
    };
    o.destroy = [](void* ctx, int, void* ev) {
      auto* w = static_cast<Work*>(ctx);
      ++w->destroyed;
      w->live.erase(std::find(w->live.begin(), w->live.end(), static_cast<Ev*>(ev)));
      delete static_cast<Ev*>(ev);
    };
    return o;
  }
  void finish(void* stream) {
    for (Ev* e : live)
      if (e->stream == stream) e->done = true;
  }
};

int block_a, block_b;
void* const s1 = reinterpret_cast<void*>(uintptr_t(0x100));
void* const s2 = reinterpret_cast<void*>(uintptr_t(0x200));

TEST(StreamOrderedFrees, FreeWaitsForEveryOtherRecordedStream) {
  Work w;
  StreamOrderedFrees<int*> f(w.ops());
  ASSERT_TRUE(f.enabled());
  EXPECT_TRUE(f.record_use(&block_a, s1));
  EXPECT_TRUE(f.record_use(&block_a, s1));  // twice is one use
  EXPECT_TRUE(f.record_use(&block_a, s2));
  EXPECT_TRUE(f.record_use(&block_a, nullptr));  // its allocating stream: no event
  EXPECT_FALSE(f.defer_free(1, &block_a, nullptr));
  EXPECT_EQ(w.recorded, 2);
  for (auto* e : w.live) EXPECT_EQ(e->device, 1);
  EXPECT_EQ(f.pending(), 1u);
  EXPECT_EQ(f.recorded(), 0u);

  std::vector<int*> back;
  auto reuse = [&](int* b) { back.push_back(b); };
  EXPECT_EQ(f.collect(reuse), 0u);
  w.finish(s1);
  EXPECT_EQ(f.collect(reuse), 0u);  // s2 still runs
  EXPECT_TRUE(back.empty());
  w.finish(s2);
  EXPECT_EQ(f.collect(reuse), 1u);
  EXPECT_EQ(back, std::vector<int*>{&block_a});
  EXPECT_EQ(f.pending(), 0u);
  EXPECT_EQ(w.destroyed, 2);
  EXPECT_EQ(w.waited, 0);
}

TEST(StreamOrderedFrees, UnrecordedFreesAreReusedAtOnce) {
  Work w;
  StreamOrderedFrees<int*> f(w.ops());
  EXPECT_TRUE(f.defer_free(0, &block_a, nullptr));
  f.record_use(&block_b, s1);
  EXPECT_TRUE(f.defer_free(0, &block_b, s1));  // only its own stream
  EXPECT_EQ(w.recorded, 0);
  // A free forgets the uses: a block handed out again starts clean.
  EXPECT_TRUE(f.defer_free(0, &block_b, nullptr));
}

TEST(StreamOrderedFrees, DrainWaitsAndAbandonReleasesWithoutWaiting) {
  Work w;
  std::vector<int*> back;
  {
    StreamOrderedFrees<int*> f(w.ops());
    f.record_use(&block_a, s1);
    f.record_use(&block_b, s2);
    EXPECT_FALSE(f.defer_free(0, &block_a, nullptr));
    EXPECT_FALSE(f.defer_free(0, &block_b, nullptr));
    w.finish(s2);
    EXPECT_EQ(f.drain([&](int* b) { back.push_back(b); }), 2u);
    EXPECT_EQ(w.waited, 1);  // only the event not yet complete was waited for
    f.record_use(&block_a, s1);
    EXPECT_FALSE(f.defer_free(0, &block_a, nullptr));
    f.abandon([&](int* b) { back.push_back(b); });
    EXPECT_EQ(w.waited, 1);
    EXPECT_EQ(f.pending(), 0u);
  }
  EXPECT_EQ(back.size(), 3u);
  EXPECT_TRUE(w.live.empty());
  EXPECT_EQ(w.destroyed, w.recorded);
}

TEST(StreamOrderedFrees, WithoutEventsRecordingIsRefused) {
  StreamOrderedFrees<int*> f(StreamEventOps{});
  EXPECT_FALSE(f.enabled());
  EXPECT_FALSE(f.record_use(&block_a, s1));
  EXPECT_TRUE(f.defer_free(0, &block_a, nullptr));
}

}  // namespace
