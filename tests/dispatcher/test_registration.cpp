// Registration bookkeeping of the dispatcher: undoing registrations in any order publishes the
// latest live one of each slot (Note [Registration stacks]), at scale; and check_define_op refuses
// up front what define_op would refuse, defining nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "op_registry.h"
#include "tessera/dispatcher.h"
#include "tessera/error.h"

namespace {

using tessera::DeviceType;
using tessera::Dispatcher;
using tessera::Functionality;
using tessera::KernelEntry;
using tessera::OperatorEntry;
using tessera::RegistrationHandle;

tessera_status_t never_called(void*, const tessera_kernel_call_t*) { return nullptr; }

// A kernel whose user_data is its number, so that the published one can be named.
KernelEntry numbered_kernel(size_t n) {
  return KernelEntry{never_called, reinterpret_cast<void*>(n + 1), TESSERA_DTYPE_MASK_ALL, TESSERA_KERNEL_FLAG_NONE,
                     "registration_test"};
}

// The number of the kernel published for `op` on `backend` (dense), or -1 when none is.
long published(const OperatorEntry& op, DeviceType backend) {
  const size_t slot = size_t(int(Functionality::Dense) * tessera::kNumBackendSlots + int(backend));
  const KernelEntry* k = op.slots[slot].load();
  return k ? long(reinterpret_cast<uintptr_t>(k->user_data)) - 1 : -1;
}

TEST(Registration, UndoingInAnyOrderPublishesTheLatestLiveRegistration) {
  Dispatcher& d = Dispatcher::instance();
  OperatorEntry& op = d.define_op("test_reg_order(Tensor self) -> Tensor", "relu", "test");
  OperatorEntry& other = d.define_op("test_reg_order_other(Tensor self) -> Tensor", "relu", "test");
  const DeviceType dev = DeviceType::PrivateUse3;
  std::vector<RegistrationHandle> h;
  for (size_t i = 0; i < 5; ++i) {
    h.push_back(d.register_kernel(op, dev, Functionality::Dense, numbered_kernel(i)));
    d.register_kernel(other, dev, Functionality::Dense, numbered_kernel(100 + i));  // another slot, kept
  }
  EXPECT_EQ(published(op, dev), 4);
  d.deregister(h[2]);  // not the latest: nothing changes
  EXPECT_EQ(published(op, dev), 4);
  d.deregister(h[4]);  // the latest: the one before it that is still live
  EXPECT_EQ(published(op, dev), 3);
  d.deregister(h[3]);
  EXPECT_EQ(published(op, dev), 1);
  d.deregister(h[0]);
  EXPECT_EQ(published(op, dev), 1);
  d.deregister(h[1]);
  EXPECT_EQ(published(op, dev), -1);
  EXPECT_EQ(published(other, dev), 104);
  EXPECT_THROW(d.deregister(h[1]), tessera::Error);
}

// Note [Registration stacks]: 100k kernels (a large plugin) undone at shutdown, newest first as
// HostContext::deregister_all does, then oldest first, on few slots and on many.
TEST(Registration, HundredThousandRegistrationsAreUndoneInEitherOrder) {
  Dispatcher& d = Dispatcher::instance();
  constexpr size_t kOps = 100;
  constexpr size_t kPerOp = 1000;
  std::vector<OperatorEntry*> ops;
  for (size_t i = 0; i < kOps; ++i)
    ops.push_back(&d.define_op("test_reg_many_" + std::to_string(i) + "(Tensor self) -> Tensor", "relu", "test"));
  const DeviceType dev = DeviceType::PrivateUse3;
  for (bool newest_first : {true, false}) {
    std::vector<RegistrationHandle> handles;
    for (size_t k = 0; k < kPerOp; ++k)
      for (size_t i = 0; i < kOps; ++i)
        handles.push_back(d.register_kernel(*ops[i], dev, Functionality::Dense, numbered_kernel(k)));
    for (size_t i = 0; i < kOps; ++i) ASSERT_EQ(published(*ops[i], dev), long(kPerOp - 1));
    if (newest_first) std::reverse(handles.begin(), handles.end());
    // Stop half way to check what is published, then finish.
    const size_t half = handles.size() / 2;
    for (size_t j = 0; j < half; ++j) d.deregister(handles[j]);
    for (size_t i = 0; i < kOps; ++i)
      ASSERT_EQ(published(*ops[i], dev), newest_first ? long(kPerOp / 2 - 1) : long(kPerOp - 1));
    for (size_t j = half; j < handles.size(); ++j) d.deregister(handles[j]);
    for (size_t i = 0; i < kOps; ++i) ASSERT_EQ(published(*ops[i], dev), -1);
  }
}

void expect_refused_and_undefined(const char* schema, const char* meta_like, const char* fragment,
                                  const char* name) {
  Dispatcher& d = Dispatcher::instance();
  try {
    d.check_define_op(tessera::parse_schema(schema), meta_like);
    ADD_FAILURE() << schema << ": accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  EXPECT_EQ(d.find_op(name), nullptr) << schema;
  EXPECT_THROW(d.define_op(schema, meta_like, "test"), tessera::Error) << "define_op accepts " << schema;
  EXPECT_EQ(d.find_op(name), nullptr) << schema;
}

TEST(Registration, CheckDefineOpRefusesWhatDefineOpRefuses) {
  Dispatcher& d = Dispatcher::instance();
  try {
    d.check_define_op(tessera::parse_schema("add.Tensor(Tensor self) -> Tensor"), "neg");
    ADD_FAILURE() << "a core op redefined differently was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'add.Tensor' is already defined as"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(d.check_define_op(
      tessera::parse_schema("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"), "add"));
  expect_refused_and_undefined("test_chk_big(Tensor self, int n=99999999999999999999) -> Tensor", "neg",
                               "is out of range", "test_chk_big");
  expect_refused_and_undefined("test_chk_bigf(Tensor self, float x=1e999) -> Tensor", "neg", "is out of range",
                               "test_chk_bigf");
  expect_refused_and_undefined("test_chk_nometa(Tensor self) -> Tensor", "", "needs `meta_like`",
                               "test_chk_nometa");
  expect_refused_and_undefined("test_chk_like(Tensor self) -> Tensor", "no_such_op_anywhere",
                               "meta_like names unknown operator", "test_chk_like");
  expect_refused_and_undefined("test_chk_lists(Tensor[] a, Tensor[] b) -> Tensor", "neg", "two Tensor[] arguments",
                               "test_chk_lists");
  EXPECT_NO_THROW(d.check_define_op(tessera::parse_schema("test_chk_ok(Tensor self) -> Tensor"), "neg"));
  EXPECT_EQ(d.find_op("test_chk_ok"), nullptr) << "check_define_op defined the op";
  EXPECT_NO_THROW(
      d.check_define_op(tessera::parse_schema("test_chk_pending(Tensor self) -> Tensor"), "test_chk_ok", true));
}

}  // namespace
