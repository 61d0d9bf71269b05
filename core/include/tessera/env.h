// Strict parsing of the TESSERA_* environment variables. See Note [Environment variables].
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/export.h"

namespace tessera {

// Note [Environment variables]
// Every TESSERA_* variable is read with env_value (secure_getenv: ignored in setuid and setgid
// processes) and parsed by one of the functions below, never by hand. A value that is not exactly
// one of the accepted forms is refused, not guessed at: the functions throw Error(InvalidArgument)
// with one line naming the variable, the value (escaped) and the accepted forms, e.g.
//   TESSERA_CPU_FALLBACK='maybe' is not a boolean; use 1, 0, true, false, on, off, yes or no
// An unset variable means the documented default; a variable set to the empty string is a value
// like any other (refused where it is not an accepted form). Where a refusal must not throw (the
// log settings), the caller prints the same line as a warning and ignores the variable.

// The value of environment variable `name`, or nullptr when unset (or in a setuid/setgid process).
TESSERA_API const char* env_value(const char* name);

// 1, true, on, yes -> true; 0, false, off, no -> false (any letter case). Anything else throws.
TESSERA_API bool parse_env_bool(const char* name, std::string_view text);

// A byte count ("512", "3M", "1KiB", "2GB"; K/M/G are powers of 1024). Throws for anything else:
// empty, signs, fractions, trailing characters, values beyond 64 bits.
TESSERA_API uint64_t parse_byte_count(const char* name, std::string_view text);

// A whole number in [lo, hi], decimal, no sign for non-negative ranges, nothing around it.
TESSERA_API int64_t parse_env_int(const char* name, std::string_view text, int64_t lo, int64_t hi);

// A `separator`-separated list. Spaces and tabs around an item are dropped; an empty item (",,", a
// separator at either end) throws, and so does an item for which `valid_item` returns false,
// naming the item and `item_forms` (what an item may be). An empty `text` is an empty list.
TESSERA_API std::vector<std::string> parse_env_list(const char* name, std::string_view text, char separator,
                                                    bool (*valid_item)(std::string_view item),
                                                    const char* item_forms);

// A ','-separated list of fnmatch globs on plugin names: each item is made of letters, digits, '_',
// '-', '.' and the glob characters '*', '?', '[', ']', '!', with balanced brackets.
TESSERA_API std::vector<std::string> parse_env_globs(const char* name, std::string_view text);

}  // namespace tessera
