// Strict parsing of the TESSERA_* environment variables. See Note [Environment variables] in env.h.
#include "tessera/env.h"

#include <cstdlib>

#include "tessera/error.h"
#include "tessera/text_escape.h"

namespace tessera {
namespace {

[[noreturn]] void refuse(const char* name, std::string_view text, const std::string& what) {
  detail::throw_error(ErrorCode::InvalidArgument,
                      detail::str_cat(name, "='", printable_text(text), "' ", what));
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char c = a[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != b[i]) return false;
  }
  return true;
}

bool is_glob_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.' || c == '*' || c == '?' || c == '[' || c == ']' || c == '!';
}

bool valid_plugin_glob(std::string_view item) {
  bool in_bracket = false;
  for (char c : item) {
    if (!is_glob_char(c)) return false;
    if (c == '[') {
      if (in_bracket) return false;
      in_bracket = true;
    } else if (c == ']') {
      if (!in_bracket) return false;
      in_bracket = false;
    }
  }
  return !in_bracket;
}

}  // namespace

const char* env_value(const char* name) { return ::secure_getenv(name); }

bool parse_env_bool(const char* name, std::string_view text) {
  for (const char* t : {"1", "true", "on", "yes"})
    if (equals_ignoring_case(text, t)) return true;
  for (const char* f : {"0", "false", "off", "no"})
    if (equals_ignoring_case(text, f)) return false;
  refuse(name, text, "is not a boolean; use 1, 0, true, false, on, off, yes or no");
}

uint64_t parse_byte_count(const char* name, std::string_view text) {
  auto fail = [&](const char* what) {
    refuse(name, text,
           detail::str_cat("is not a byte count: ", what,
                           "; give a whole number of bytes with an optional K, M or G suffix (powers of 1024), "
                           "e.g. 512M"));
  };
  size_t i = 0;
  uint64_t v = 0;
  if (text.empty()) fail("it is empty");
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    if (__builtin_mul_overflow(v, uint64_t(10), &v) || __builtin_add_overflow(v, uint64_t(text[i] - '0'), &v))
      fail("it does not fit in 64 bits");
    ++i;
  }
  if (i == 0) fail(text[0] == '-' || text[0] == '+' ? "a sign is not allowed" : "it does not start with a digit");
  int shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'k': case 'K': shift = 10; ++i; break;
      case 'm': case 'M': shift = 20; ++i; break;
      case 'g': case 'G': shift = 30; ++i; break;
      default: break;
    }
    if (shift && i < text.size() && (text[i] == 'i' || text[i] == 'I')) ++i;
    if (i < text.size() && (text[i] == 'b' || text[i] == 'B')) ++i;
  }
  if (i != text.size()) fail(text[i] == '.' ? "fractions are not allowed" : "unexpected characters after the number");
  if (shift && v > (UINT64_MAX >> shift)) fail("it does not fit in 64 bits");
  return v << shift;
}

int64_t parse_env_int(const char* name, std::string_view text, int64_t lo, int64_t hi) {
  auto fail = [&] {
    refuse(name, text, detail::str_cat("is not a whole number from ", lo, " to ", hi));
  };
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) {
    if (lo >= 0) fail();
    ++i;
  }
  if (i == text.size()) fail();
  uint64_t magnitude = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') fail();
    if (__builtin_mul_overflow(magnitude, uint64_t(10), &magnitude) ||
        __builtin_add_overflow(magnitude, uint64_t(text[i] - '0'), &magnitude))
      fail();
  }
  if (magnitude > (negative ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX))) fail();
  const int64_t v = negative ? int64_t(0 - magnitude) : int64_t(magnitude);
  if (v < lo || v > hi) fail();
  return v;
}

std::vector<std::string> parse_env_list(const char* name, std::string_view text, char separator,
                                        bool (*valid_item)(std::string_view item), const char* item_forms) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.empty())
      refuse(name, text, detail::str_cat("has an empty item; separate ", item_forms, " with single '", separator, "'"));
    if (valid_item && !valid_item(item))
      refuse(name, text, detail::str_cat("has an invalid item '", printable_text(item), "'; expected ", item_forms,
                                         " separated by '", separator, "'"));
    out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

std::vector<std::string> parse_env_globs(const char* name, std::string_view text) {
  return parse_env_list(name, text, ',', valid_plugin_glob,
                        "globs on plugin names (letters, digits, '_', '-', '.', and '*', '?', '[...]')");
}

}  // namespace tessera
