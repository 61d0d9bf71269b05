#include <gtest/gtest.h>

#include "tessera/dispatcher.h"
#include "tessera/schema.h"

namespace tessera {
namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_schema(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Schema, ParsesAddTensor) {
  FunctionSchema s = parse_schema("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  EXPECT_EQ(s.name, "add");
  EXPECT_EQ(s.overload, "Tensor");
  EXPECT_EQ(s.full_name(), "add.Tensor");
  ASSERT_EQ(s.arguments.size(), 3u);
  EXPECT_EQ(s.arguments[0].type, ArgType::Tensor);
  EXPECT_EQ(s.arguments[0].name, "self");
  EXPECT_FALSE(s.arguments[1].kwarg_only);
  EXPECT_EQ(s.arguments[2].type, ArgType::Scalar);
  EXPECT_TRUE(s.arguments[2].kwarg_only);
  EXPECT_EQ(s.arguments[2].default_value, "1");
  ASSERT_EQ(s.returns.size(), 1u);
  EXPECT_EQ(s.returns[0].type, ArgType::Tensor);
}

TEST(Schema, ParsesAliasAnnotations) {
  FunctionSchema s = parse_schema("fill_(Tensor(a!) self, Scalar value) -> Tensor(a!)");
  EXPECT_EQ(s.overload, "");
  EXPECT_EQ(s.arguments[0].alias, "a");
  EXPECT_TRUE(s.arguments[0].is_write);
  EXPECT_EQ(s.returns[0].alias, "a");
  EXPECT_TRUE(s.returns[0].is_write);
  FunctionSchema v = parse_schema("view(Tensor(a) self, int[] size) -> Tensor(a)");
  EXPECT_EQ(v.arguments[0].alias, "a");
  EXPECT_FALSE(v.arguments[0].is_write);
  // A written list, which returns nothing (the list optimizer steps), round-trips.
  FunctionSchema l = parse_schema("_step_(Tensor(a!)[] tensors, float lr) -> ()");
  EXPECT_EQ(l.arguments[0].type, ArgType::TensorList);
  EXPECT_EQ(l.arguments[0].alias, "a");
  EXPECT_TRUE(l.arguments[0].is_write);
  EXPECT_TRUE(l.returns.empty());
  EXPECT_EQ(l.str(), "_step_(Tensor(a!)[] tensors, float lr) -> ()");
}

TEST(Schema, ParsesEveryTypeAndDefault) {
  FunctionSchema s = parse_schema(
      "f(Tensor? a, Tensor[] b, int[2] c=1, int[]? d=None, float? e=None, str f=\"none\", ScalarType? "
      "g=None, "
      "bool h=True, int[] i=[1, 1], float j=1e-05, int? k=None, str? l=None, ScalarType m=float32, int n=-3, "
      "SymInt o=2) -> (Tensor, Tensor out)");
  ASSERT_EQ(s.arguments.size(), 15u);
  EXPECT_EQ(s.arguments[0].type, ArgType::OptionalTensor);
  EXPECT_EQ(s.arguments[1].type, ArgType::TensorList);
  EXPECT_EQ(s.arguments[2].type, ArgType::IntList);
  EXPECT_EQ(s.arguments[2].list_size, 2);
  EXPECT_EQ(s.arguments[2].default_value, "1");
  EXPECT_EQ(s.arguments[3].type, ArgType::OptionalIntList);
  EXPECT_EQ(s.arguments[3].default_value, "None");
  EXPECT_EQ(s.arguments[4].type, ArgType::OptionalFloat);
  EXPECT_EQ(s.arguments[5].type, ArgType::String);
  EXPECT_EQ(s.arguments[5].default_value, "\"none\"");
  EXPECT_EQ(s.arguments[6].type, ArgType::OptionalDType);
  EXPECT_EQ(s.arguments[7].default_value, "True");
  EXPECT_EQ(s.arguments[8].default_value, "[1, 1]");
  EXPECT_EQ(s.arguments[9].type, ArgType::Float);
  EXPECT_EQ(s.arguments[10].type, ArgType::OptionalInt);
  EXPECT_EQ(s.arguments[11].type, ArgType::OptionalString);
  EXPECT_EQ(s.arguments[12].type, ArgType::DType);
  EXPECT_EQ(s.arguments[13].default_value, "-3");
  EXPECT_EQ(s.arguments[14].type, ArgType::Int);
  ASSERT_EQ(s.returns.size(), 2u);
  EXPECT_EQ(s.returns[1].name, "out");
}

TEST(Schema, StrRoundTrips) {
  const char* schemas[] = {
      "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
      "fill_(Tensor(a!) self, Scalar value) -> Tensor(a!)",
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, int[2] "
      "dilation=1, int groups=1) -> Tensor",
      "gelu(Tensor self, *, str approximate=\"none\") -> Tensor",
      "sum(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor",
      "cat(Tensor[] tensors, int dim=0) -> Tensor",
      "two(Tensor self) -> (Tensor, Tensor)",
      "none(Tensor self) -> ()",
      "f(int[] i=[1,2 , 3], str s='x') -> Tensor",
  };
  for (const char* text : schemas) {
    FunctionSchema s = parse_schema(text);
    std::string canonical = s.str();
    EXPECT_EQ(parse_schema(canonical).str(), canonical) << text;
  }
  EXPECT_EQ(parse_schema("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor").str(),
            "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  EXPECT_EQ(parse_schema("f(int[] i=[1,2 , 3], str s='x') -> Tensor").str(),
            "f(int[] i=[1, 2, 3], str s=\"x\") -> Tensor");
}

// Scalar? (clamp's bounds): None, a number or a bool as its default.
TEST(Schema, OptionalScalar) {
  FunctionSchema s = parse_schema("clamp(Tensor self, Scalar? min=None, Scalar? max=2.5, Scalar? c=True) -> Tensor");
  EXPECT_EQ(s.arguments[1].type, ArgType::OptionalScalar);
  EXPECT_EQ(s.arguments[1].default_value, "None");
  EXPECT_EQ(s.arguments[2].default_value, "2.5");
  EXPECT_EQ(s.str(), "clamp(Tensor self, Scalar? min=None, Scalar? max=2.5, Scalar? c=True) -> Tensor");
  EXPECT_NE(parse_error("f(Scalar a=None) -> Tensor").find("default None does not fit type 'Scalar'"),
            std::string::npos);
}

TEST(Schema, EveryCatalogueSchemaRoundTrips) {
  Dispatcher& d = Dispatcher::instance();
  std::vector<std::string> names = d.op_names();
  EXPECT_GE(names.size(), 60u);
  for (const std::string& n : names) {
    const FunctionSchema& s = d.schema(d.op(n));
    EXPECT_EQ(parse_schema(s.str()).str(), s.str()) << n;
  }
}

TEST(Schema, ErrorsPointAtTheColumn) {
  // Missing ')': the '-' of '->' is at column 31.
  EXPECT_EQ(parse_error("add(Tensor self, Tensor other -> Tensor"),
            "schema: expected ')', got '-' at column 31\n"
            "add(Tensor self, Tensor other -> Tensor\n"
            "                              ^");
  EXPECT_EQ(parse_error("add(Tensor self, Tensor other) Tensor"),
            "schema: expected '-', got 'T' at column 32\n"
            "add(Tensor self, Tensor other) Tensor\n"
            "                               ^");
  EXPECT_EQ(parse_error("add(Tensor self"),
            "schema: expected ')', got end of schema at column 16\n"
            "add(Tensor self\n"
            "               ^");
}

TEST(Schema, ErrorMessages) {
  EXPECT_NE(parse_error("1add(Tensor self) -> Tensor").find("expected operator name, got '1' at column 1"),
            std::string::npos);
  EXPECT_NE(parse_error("f(Tensor a, Tensor a) -> Tensor").find("argument name 'a' used twice at column 13"),
            std::string::npos);
  EXPECT_NE(parse_error("f(Foo a) -> Tensor").find("unsupported type 'Foo' (known:"), std::string::npos);
  EXPECT_NE(parse_error("f(bool? a) -> Tensor").find("unsupported type 'bool?'"), std::string::npos);
  EXPECT_NE(parse_error("f(int a=None) -> Tensor").find("default None does not fit type 'int' at column 9"),
            std::string::npos);
  EXPECT_NE(parse_error("f(int a=1.5) -> Tensor").find("default floating number does not fit type 'int'"),
            std::string::npos);
  EXPECT_NE(parse_error("f(str a=\"x) -> Tensor").find("unterminated string at column 9"), std::string::npos);
  EXPECT_NE(
      parse_error("f(int(a!) a) -> Tensor").find("alias annotation on non-Tensor type 'int' at column 6"),
      std::string::npos);
  EXPECT_NE(parse_error("f(Tensor(a)[] a) -> ()").find("alias annotation on 'Tensor[]' (a list may only be written"),
            std::string::npos);
  EXPECT_NE(parse_error("f(Tensor a) -> Tensor(a!)[]").find("alias annotation on 'Tensor[]'"), std::string::npos);
  EXPECT_NE(parse_error("f(Tensor a, *) -> Tensor").find("expected an argument after '*'"),
            std::string::npos);
  EXPECT_NE(
      parse_error("f(Tensor a) -> Tensor out extra").find("expected end of schema, got 'e' at column 27"),
      std::string::npos);
  EXPECT_NE(parse_error("f(int[0] a) -> Tensor").find("list size must be positive"), std::string::npos);
  EXPECT_NE(parse_error("f(Tensor a=1) -> Tensor").find("default number does not fit type 'Tensor'"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
