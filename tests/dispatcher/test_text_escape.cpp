// json_escape and printable_text (sdk/include/tessera/text_escape.h): the one escaping of untrusted
// text for JSON and for a terminal. Expected strings are written out by hand.
#include <gtest/gtest.h>

#include <string>

#include "tessera/text_escape.h"

namespace {

using tessera::json_escape;
using tessera::printable_text;

TEST(TextEscape, JsonEscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_escape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(json_escape("l1\nl2\tx\ry"), "l1\\nl2\\tx\\ry");
  EXPECT_EQ(json_escape(std::string("\x1b[31m\x00\x7f", 7)), "\\u001b[31m\\u0000\\u007f");
  EXPECT_EQ(json_escape("\xc2\x9b" "1m"), "\\u009b1m");  // C1 CSI, encoded as UTF-8
}

TEST(TextEscape, JsonKeepsUtf8AndReplacesEveryInvalidByte) {
  EXPECT_EQ(json_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(json_escape("a\xff" "b"), "a\\ufffdb");
  EXPECT_EQ(json_escape("\xc0\xaf"), "\\ufffd\\ufffd");          // overlong '/'
  EXPECT_EQ(json_escape("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");  // a surrogate
  EXPECT_EQ(json_escape("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd");  // above U+10FFFF
  EXPECT_EQ(json_escape("x\xe2\x82"), "x\\ufffd\\ufffd");        // truncated at the end
}

TEST(TextEscape, PrintableTextEscapesControlsAndInvalidBytesOnly) {
  EXPECT_EQ(printable_text("plain \\ text \xc3\xa9"), "plain \\ text \xc3\xa9");
  EXPECT_EQ(printable_text("1.0\x1b]0;t\x07"), "1.0\\x1b]0;t\\x07");
  EXPECT_EQ(printable_text(std::string("a\x00z", 3)), "a\\x00z");
  EXPECT_EQ(printable_text("\xc2\x9b" "2J"), "\\xc2\\x9b2J");
  EXPECT_EQ(printable_text("lt_\xff\xfe.json"), "lt_\\xff\\xfe.json");
  EXPECT_EQ(printable_text("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(printable_text(""), "");
}

}  // namespace
