// Limits of the schema parser: an argument cap with a short, clear error, and a duplicate-name check
// that still finds the duplicate at the end of a long list.
#include <gtest/gtest.h>

#include <string>

#include "tessera/error.h"
#include "tessera/schema.h"

namespace {

// "name(Tensor self, int a0, int a1, ...) -> Tensor" with `n` arguments in all.
std::string schema_with_arguments(size_t n, const std::string& last_name = "") {
  std::string s = "test_many(Tensor self";
  for (size_t i = 1; i < n; ++i) {
    s += ", int ";
    if (i + 1 == n && !last_name.empty()) s += last_name;
    else s.append("a").append(std::to_string(i));
  }
  return s + ") -> Tensor";
}

std::string parse_error(const std::string& schema) {
  try {
    tessera::parse_schema(schema);
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "";
}

TEST(SchemaLimits, UpToTheCapParsesAndOneMoreIsRefused) {
  ASSERT_EQ(tessera::kMaxSchemaArguments, 1024u);
  EXPECT_EQ(tessera::parse_schema(schema_with_arguments(1024)).arguments.size(), 1024u);
  const std::string err = parse_error(schema_with_arguments(1025));
  EXPECT_NE(err.find("more than 1024 arguments"), std::string::npos) << err.substr(0, 300);
  EXPECT_LT(err.size(), 400u) << "the message repeats the whole schema";
}

TEST(SchemaLimits, HundredThousandArgumentsAreRefusedWithAShortMessage) {
  const std::string err = parse_error(schema_with_arguments(100000));
  EXPECT_NE(err.find("more than 1024 arguments"), std::string::npos) << err.substr(0, 300);
  EXPECT_LT(err.size(), 400u);
}

TEST(SchemaLimits, TooManyReturnsAreRefused) {
  std::string s = "test_many_returns(Tensor self) -> (";
  for (size_t i = 0; i < 1025; ++i) s += (i ? ", Tensor" : "Tensor");
  const std::string err = parse_error(s + ")");
  EXPECT_NE(err.find("more than 1024 returns"), std::string::npos) << err.substr(0, 300);
}

TEST(SchemaLimits, DuplicateNameAtTheEndOfALongListIsFound) {
  const std::string err = parse_error(schema_with_arguments(1000, "a7"));
  EXPECT_NE(err.find("argument name 'a7' used twice"), std::string::npos) << err.substr(0, 300);
  EXPECT_LT(err.size(), 400u);
  // The caret still points at the column given, inside the shortened line.
  const size_t nl1 = err.find('\n'), nl2 = err.find('\n', nl1 + 1);
  ASSERT_NE(nl2, std::string::npos) << err;
  const std::string line = err.substr(nl1 + 1, nl2 - nl1 - 1), caret = err.substr(nl2 + 1);
  EXPECT_EQ(line.substr(caret.size() - 1, 6), "int a7") << line << "\n" << caret;
}

}  // namespace
