#include <gtest/gtest.h>

#include <thread>

#include "tessera/dispatch_key.h"

namespace tessera {
namespace {

TEST(DispatchKey, FunctionalityNames) {
  EXPECT_STREQ(functionality_name(Functionality::Dense), "Dense");
  EXPECT_STREQ(functionality_name(Functionality::Autograd), "Autograd");
  EXPECT_STREQ(functionality_name(Functionality::Export), "Export");
}

TEST(DispatchKey, Str) {
  EXPECT_EQ(DispatchKeySet::dense(kCPU).str(), "DispatchKeySet(Dense, CPU)");
  EXPECT_EQ(DispatchKeySet().str(), "DispatchKeySet()");
  const auto ks = DispatchKeySet::dense(kPrivateUse1) | DispatchKeySet::functionality(Functionality::Autocast) |
                  DispatchKeySet::backend(kCUDA);
  EXPECT_EQ(ks.str(), "DispatchKeySet(Dense, Autocast, CUDA, PrivateUse1)");
}

TEST(DispatchKey, SlotPicksHighestFunctionalityAndBackend) {
  EXPECT_EQ(DispatchKeySet::dense(kCPU).slot(), 0);
  EXPECT_EQ(DispatchKeySet::dense(kCUDA).slot(), 1);
  const auto ks = DispatchKeySet::dense(kOpenCL) | DispatchKeySet::functionality(Functionality::Autograd);
  EXPECT_EQ(ks.slot(), 3 * kNumBackendSlots + 2);
  EXPECT_EQ(DispatchKeySet::backend(kCPU).slot(), -1);
  EXPECT_EQ((ks - DispatchKeySet::functionality(Functionality::Autograd)).slot(), 2);
}

TEST(DispatchKey, LocalSetsAreThreadLocalAndScoped) {
  const auto autocast = DispatchKeySet::functionality(Functionality::Autocast);
  EXPECT_TRUE(tls_local_dispatch_key_set().included.empty());
  {
    IncludeDispatchKeyGuard g(autocast);
    ExcludeDispatchKeyGuard x(DispatchKeySet::functionality(Functionality::Autograd));
    EXPECT_EQ(tls_local_dispatch_key_set().included, autocast);
    EXPECT_TRUE(tls_local_dispatch_key_set().excluded.has(Functionality::Autograd));
    bool other_empty = false;
    std::thread([&] { other_empty = tls_local_dispatch_key_set().included.empty(); }).join();
    EXPECT_TRUE(other_empty);
  }
  EXPECT_TRUE(tls_local_dispatch_key_set().included.empty());
  EXPECT_TRUE(tls_local_dispatch_key_set().excluded.empty());
}

}  // namespace
}  // namespace tessera
