// The op contract (Note [Op contract]): dispatcher/ops/ops.json is the one source of the built-in
// operators; the dispatcher's catalogue and tessera/op_names.h are generated from it.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/dispatcher.h"
#include "tessera/op_names.h"
#include "tessera/schema.h"

namespace {

using tessera::Dispatcher;

nlohmann::json read_contract() {
  std::ifstream in(TESSERA_OPS_JSON);
  EXPECT_TRUE(in.good()) << TESSERA_OPS_JSON;
  return nlohmann::json::parse(in, nullptr, false);
}

TEST(OpContract, EveryOpOfOpsJsonIsDefinedWithItsSchemaTagsAndDoc) {
  nlohmann::json contract = read_contract();
  ASSERT_FALSE(contract.is_discarded());
  ASSERT_EQ(contract["ops"].size(), size_t(tessera::op::kNumOps));
  Dispatcher& d = Dispatcher::instance();
  for (const auto& entry : contract["ops"]) {
    const std::string schema = entry["schema"];
    const std::string name = schema.substr(0, schema.find('('));
    tessera::OperatorEntry* op = d.find_op(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_EQ(d.schema(*op).str(), tessera::parse_schema(schema).str());
    EXPECT_EQ(d.tags(*op), entry["tags"].get<std::vector<std::string>>()) << name;
    EXPECT_EQ(d.doc(*op), entry["doc"].get<std::string>()) << name;
    EXPECT_EQ(d.provider(*op), "builtin") << name;
    for (const auto& tag : entry["tags"]) EXPECT_TRUE(contract["tags"].contains(tag)) << name << ": " << tag;
  }
}

// Indices read off the schemas by hand: attributes are the non-tensor arguments in schema order,
// tensors the Tensor and Tensor? arguments.
TEST(OpContract, GeneratedNamesAndArgumentIndicesMatchTheSchemas) {
  EXPECT_STREQ(tessera::op::add_Tensor::name, "add.Tensor");
  EXPECT_STREQ(tessera::op::add__Tensor::name, "add_.Tensor");
  EXPECT_STREQ(tessera::op::fill_::name, "fill_");
  EXPECT_EQ(tessera::op::add_Tensor::tensor::self, 0);
  EXPECT_EQ(tessera::op::add_Tensor::tensor::other, 1);
  EXPECT_EQ(tessera::op::add_Tensor::attr::alpha, 0);
  EXPECT_EQ(tessera::op::where_self::tensor::condition, 0);
  EXPECT_EQ(tessera::op::where_self::tensor::other, 2);
  // conv2d(Tensor input, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, int groups)
  EXPECT_EQ(tessera::op::conv2d::tensor::bias, 2);
  EXPECT_EQ(tessera::op::conv2d::attr::stride, 0);
  EXPECT_EQ(tessera::op::conv2d::attr::groups, 3);
  // var(Tensor self, int[] dim, int correction, bool keepdim)
  EXPECT_EQ(tessera::op::var::attr::correction, 1);
  EXPECT_EQ(tessera::op::var::attr::keepdim, 2);
  // sdpa(query, key, value, Tensor? attn_mask, bool is_causal, *, float? scale)
  EXPECT_EQ(tessera::op::scaled_dot_product_attention::tensor::attn_mask, 3);
  EXPECT_EQ(tessera::op::scaled_dot_product_attention::attr::scale, 1);
  // uniform_(Tensor(a!) self, float from, float to, int seed, int offset)
  EXPECT_EQ(tessera::op::uniform_::attr::offset, 3);
}

TEST(OpContract, EveryGeneratedNameIsADefinedOp) {
  Dispatcher& d = Dispatcher::instance();
  for (const char* name : {tessera::op::empty_strided::name, tessera::op::pow_Tensor_Scalar::name,
                           tessera::op::mul__Tensor::name, tessera::op::gather::name, tessera::op::_to_copy::name})
    EXPECT_NE(d.find_op(name), nullptr) << name;
}

}  // namespace
