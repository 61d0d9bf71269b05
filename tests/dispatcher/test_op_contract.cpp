// The op contract (Note [Op contract]): dispatcher/ops/ops.json is the one source of the built-in
// operators; the dispatcher's catalogue, tessera/op_names.h, the OpInfo table (Note [OpInfo]) and
// the public functions of the plain ops are generated from it.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "op_registry.h"
#include "shape_rules.h"
#include "tessera/dispatcher.h"
#include "tessera/op_info.h"
#include "tessera/op_names.h"
#include "tessera/ops.h"
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
    EXPECT_EQ(d.provider(*op), entry.value("provider", std::string("builtin"))) << name;
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

// The OpInfo table is ops.json as data: names, overloads, schemas, tags, provider, and argument
// indices that agree with op_names.h.
TEST(OpContract, OpInfoTableMatchesOpsJsonAndOpNames) {
  nlohmann::json contract = read_contract();
  ASSERT_EQ(contract["ops"].size(), size_t(tessera::op::kNumOpInfos));
  for (int i = 0; i < tessera::op::kNumOpInfos; ++i) {
    const tessera::op::OpInfo& info = tessera::op::kOpInfos[i];
    const auto& entry = contract["ops"][size_t(i)];
    EXPECT_EQ(info.schema, entry["schema"].get<std::string>());
    EXPECT_EQ(info.provider, entry.value("provider", std::string("builtin"))) << info.name;
    EXPECT_EQ(info.shape_rule, entry["shape_rule"].get<std::string>()) << info.name;
    EXPECT_EQ(info.sizes == tessera::op::SizesRule::None, !entry.contains("sizes")) << info.name;
    int tags = 0;
    for (const auto& t : entry["tags"]) {
      int bit = -1;
      for (int k = 0; k < tessera::op::kNumTags; ++k)
        if (t == tessera::op::kTagNames[k]) bit = k;
      ASSERT_GE(bit, 0) << info.name << ": " << t;
      tags |= 1 << bit;
    }
    EXPECT_EQ(info.tags, uint32_t(tags)) << info.name;
    EXPECT_EQ(tessera::op::find_op_info(info.name), &info);
  }
  const tessera::op::OpInfo* add = tessera::op::find_op_info("add");  // the only overload of add
  ASSERT_NE(add, nullptr);
  EXPECT_STREQ(add->name, tessera::op::add_Tensor::name);
  EXPECT_STREQ(add->overload, "Tensor");
  EXPECT_TRUE(add->has(tessera::op::kTagPointwise));
  EXPECT_FALSE(add->has(tessera::op::kTagInplace));
  ASSERT_EQ(add->num_args, 3);
  EXPECT_STREQ(add->args[2].name, "alpha");
  EXPECT_EQ(add->args[2].attr_index, tessera::op::add_Tensor::attr::alpha);
  EXPECT_EQ(add->args[1].tensor_index, tessera::op::add_Tensor::tensor::other);
  EXPECT_STREQ(add->args[2].default_value, "1");
  EXPECT_TRUE(tessera::op::find_op_info("uniform_")->has(tessera::op::kTagRandom));
  EXPECT_EQ(tessera::op::find_op_info("add.Scalar"), nullptr);
  EXPECT_EQ(tessera::op::find_op_info("pow"), nullptr);  // two overloads, neither unnamed
  const tessera::op::OpInfo* cat = tessera::op::find_op_info("cat");
  EXPECT_TRUE(cat->args[0].is_list);
  EXPECT_EQ(cat->args[0].tensor_index, -1);
  EXPECT_EQ(cat->args[1].attr_index, 0);
}

// Ops a plugin implements are declared in the contract with their provider and defined from the
// start, so that codegen can only emit ops the contract knows (Note [Linear epilogues]).
TEST(OpContract, PluginProvidedOpsAreDefinedFromTheContract) {
  Dispatcher& d = Dispatcher::instance();
  for (const char* name : {tessera::op::_linear_epilogue::name, tessera::op::_conv2d_epilogue::name}) {
    tessera::OperatorEntry* op = d.find_op(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_EQ(d.provider(*op), "cpu") << name;
    EXPECT_STREQ(tessera::op::find_op_info(name)->provider, "cpu");
  }
  // The plugin's own definition of the same schema is accepted as the same op.
  tessera::OperatorEntry& again = d.define_op(
      "_linear_epilogue(Tensor input, Tensor weight, Tensor? bias=None, Tensor? residual=None, "
      "str activation=\"none\") -> Tensor",
      "linear", "cpu");
  EXPECT_EQ(&again, d.find_op(tessera::op::_linear_epilogue::name));
}

// A sizes rule is one function for concrete and symbolic sizes (Note [Shape rules]); here on int64_t
// as the eager shape rule runs it, with the arguments as a call passes them.
TEST(OpContract, SizesRulesReadTheCallsArguments) {
  using tessera::IntArrayRef;
  const int64_t x[] = {2, 3, 4}, idx[] = {5};
  IntArrayRef tensors[] = {IntArrayRef(x, 3), IntArrayRef(idx, 1)};
  tessera_value_t attrs[2];
  attrs[0] = tessera::value_int(1);
  tessera::shape::SizeArgs<int64_t> a;
  a.op = "index_select";
  a.tensors = tensors;
  a.num_tensors = 2;
  a.attrs = attrs;
  a.num_attrs = 1;
  tessera::shape::Sizes<int64_t> out;
  ASSERT_TRUE(tessera::shape::output_sizes(tessera::op::find_op_info("index_select")->sizes, a, &out));
  EXPECT_EQ(std::vector<int64_t>(out.begin(), out.end()), (std::vector<int64_t>{2, 5, 4}));
  // sum(x, dim=[-1], keepdim=True)
  const int64_t dims[] = {-1};
  attrs[0] = tessera::value_ints(IntArrayRef(dims, 1));
  attrs[1] = tessera::value_bool(true);
  a.op = "sum";
  a.num_tensors = 1;
  a.num_attrs = 2;
  ASSERT_TRUE(tessera::shape::output_sizes(tessera::op::find_op_info("sum")->sizes, a, &out));
  EXPECT_EQ(std::vector<int64_t>(out.begin(), out.end()), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_FALSE(tessera::shape::output_sizes(tessera::op::find_op_info("arange")->sizes, a, &out));
}

// The public functions of plain ops are generated from ops.json: clamp's checks run in its shape
// rule before any kernel (no plugin is loaded here).
TEST(OpContract, GeneratedFunctionsCallTheirOps) {
  tessera::Tensor x = tessera::empty({3}, tessera::dtype(tessera::kFloat32).device(tessera::Device("meta")));
  tessera::Tensor y = tessera::clamp(x, -1, 1);
  EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(y.dtype(), tessera::kFloat32);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const tessera::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([&] { tessera::clamp(x); }).find("clamp: at least one of 'min' or 'max' must not be None"),
            std::string::npos);
  tessera::Tensor b = tessera::empty({3}, tessera::dtype(tessera::kBool).device(tessera::Device("meta")));
  EXPECT_NE(message([&] { tessera::clamp(b, true); }).find("not implemented for bool"), std::string::npos);
  tessera::Tensor i = tessera::empty({3}, tessera::dtype(tessera::kInt8).device(tessera::Device("meta")));
  EXPECT_EQ(tessera::clamp(i, 0.5).dtype(), tessera::kFloat32);  // int8 with a float bound: float32
  EXPECT_EQ(tessera::clamp(i, 1, 2).dtype(), tessera::kInt8);
  EXPECT_NE(message([&] { tessera::clamp(i, 300); }).find("without overflow"), std::string::npos);
}

}  // namespace
