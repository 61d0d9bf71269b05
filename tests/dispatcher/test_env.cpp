// Strict parsing of the TESSERA_* environment variables (Note [Environment variables] in env.h):
// the helper family, and the variables the dispatcher reads through it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/dispatcher.h"
#include "tessera/env.h"
#include "tessera/error.h"

namespace {

using tessera::parse_env_bool;
using tessera::parse_env_globs;
using tessera::parse_env_int;
using tessera::parse_env_list;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const tessera::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Env, BooleansAcceptExactlyTheDocumentedForms) {
  for (const char* t : {"1", "true", "TRUE", "True", "on", "ON", "yes", "Yes"}) EXPECT_TRUE(parse_env_bool("V", t)) << t;
  for (const char* f : {"0", "false", "FALSE", "off", "Off", "no", "NO"}) EXPECT_FALSE(parse_env_bool("V", f)) << f;
  for (const char* bad : {"", " 1", "1 ", "2", "maybe", "enable", "y", "n", "00", "truee", "-1"}) {
    const std::string err = error_of([&] { parse_env_bool("TESSERA_X", bad); });
    EXPECT_EQ(err, "TESSERA_X='" + std::string(bad) + "' is not a boolean; use 1, 0, true, false, on, off, yes or no")
        << "'" << bad << "'";
  }
}

TEST(Env, ValuesAreEscapedInTheMessage) {
  const std::string err = error_of([] { parse_env_bool("TESSERA_X", "o\x1b[2Jn\xff"); });
  EXPECT_NE(err.find("TESSERA_X='o\\x1b[2Jn\\xff' is not a boolean"), std::string::npos) << err;
}

TEST(Env, IntegersAreWholeNumbersInTheirRange) {
  EXPECT_EQ(parse_env_int("V", "0", 0, 10), 0);
  EXPECT_EQ(parse_env_int("V", "10", 0, 10), 10);
  EXPECT_EQ(parse_env_int("V", "-5", -5, 5), -5);
  EXPECT_EQ(parse_env_int("V", "-9223372036854775808", INT64_MIN, 0), INT64_MIN);
  EXPECT_EQ(parse_env_int("V", "9223372036854775807", 0, INT64_MAX), INT64_MAX);
  for (const char* bad : {"", "11", "-1", "+3", " 3", "3 ", "3.0", "0x10", "1e3", "-", "99999999999999999999"}) {
    const std::string err = error_of([&] { parse_env_int("TESSERA_N", bad, 0, 10); });
    EXPECT_EQ(err, "TESSERA_N='" + std::string(bad) + "' is not a whole number from 0 to 10") << "'" << bad << "'";
  }
}

TEST(Env, ListsRefuseEmptyAndInvalidItems) {
  auto digits = [](std::string_view s) { return s.find_first_not_of("0123456789") == std::string_view::npos; };
  bool (*valid)(std::string_view) = digits;
  EXPECT_EQ(parse_env_list("V", "", ',', valid, "numbers"), std::vector<std::string>{});
  EXPECT_EQ(parse_env_list("V", "1, 22 ,\t333", ',', valid, "numbers"), (std::vector<std::string>{"1", "22", "333"}));
  for (const char* bad : {",", "1,", ",1", "1,,2", "1, ,2"})
    EXPECT_NE(error_of([&] { parse_env_list("TESSERA_L", bad, ',', valid, "numbers"); })
                  .find("TESSERA_L='" + std::string(bad) + "' has an empty item; separate numbers with single ','"),
              std::string::npos)
        << bad;
  EXPECT_EQ(error_of([&] { parse_env_list("TESSERA_L", "1,x2", ',', valid, "numbers"); }),
            "TESSERA_L='1,x2' has an invalid item 'x2'; expected numbers separated by ','");
}

TEST(Env, GlobsAreMadeOfPluginNameAndGlobCharacters) {
  EXPECT_EQ(parse_env_globs("V", "cpu,lt_*, my-npu.v[12],?uda,[!x]*"),
            (std::vector<std::string>{"cpu", "lt_*", "my-npu.v[12]", "?uda", "[!x]*"}));
  for (const char* bad : {"cpu;cuda", "lt_[ab", "lt_]", "a b", "plugins/cpu", "cpu,,cuda", "[[a]]"})
    EXPECT_NE(error_of([&] { parse_env_globs("TESSERA_PLUGINS_SELECT", bad); })
                  .find("TESSERA_PLUGINS_SELECT='" + std::string(bad) + "' has an"),
              std::string::npos)
        << bad;
}

TEST(Env, CpuFallbackIsStrict) {
  const char* old = getenv("TESSERA_CPU_FALLBACK");
  const std::string saved = old ? old : "";
  unsetenv("TESSERA_CPU_FALLBACK");
  EXPECT_TRUE(tessera::cpu_fallback_enabled());
  setenv("TESSERA_CPU_FALLBACK", "off", 1);
  EXPECT_FALSE(tessera::cpu_fallback_enabled());
  setenv("TESSERA_CPU_FALLBACK", "Yes", 1);
  EXPECT_TRUE(tessera::cpu_fallback_enabled());
  for (const char* bad : {"disabled", "", "OFF!"}) {
    setenv("TESSERA_CPU_FALLBACK", bad, 1);
    EXPECT_EQ(error_of([] { tessera::cpu_fallback_enabled(); }),
              "TESSERA_CPU_FALLBACK='" + std::string(bad) +
                  "' is not a boolean; use 1, 0, true, false, on, off, yes or no");
  }
  if (old) setenv("TESSERA_CPU_FALLBACK", saved.c_str(), 1);
  else unsetenv("TESSERA_CPU_FALLBACK");
}

}  // namespace
