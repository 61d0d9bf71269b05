// Errors: one exception family. TESSERA_CHECK for user errors, TESSERA_INTERNAL_ASSERT for bugs.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

#include "tessera/export.h"

namespace tessera {

enum class ErrorCode { InvalidArgument, OutOfMemory, Unimplemented, Unavailable, Internal, AbiMismatch };

// Base of every error Tessera throws. what() is the full, user-facing message.
class TESSERA_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] TESSERA_API void throw_error(ErrorCode code, const std::string& message);
[[noreturn]] TESSERA_API void throw_internal(const char* file, int line, const char* cond,
                                             const std::string& message);
}  // namespace detail
}  // namespace tessera

// User error: the message names the object, the value it got, what was expected and the fix.
#define TESSERA_CHECK(cond, ...)                                                              \
  do {                                                                                        \
    if (__builtin_expect(!(cond), 0))                                                         \
      ::tessera::detail::throw_error(::tessera::ErrorCode::InvalidArgument,                   \
                                     ::tessera::detail::str_cat(__VA_ARGS__));                \
  } while (0)
#define TESSERA_CHECK_CODE(cond, code, ...)                                                    \
  do {                                                                                        \
    if (__builtin_expect(!(cond), 0))                                                         \
      ::tessera::detail::throw_error(code, ::tessera::detail::str_cat(__VA_ARGS__));          \
  } while (0)
// A bug in Tessera itself.
#define TESSERA_INTERNAL_ASSERT(cond, ...)                                                    \
  do {                                                                                        \
    if (__builtin_expect(!(cond), 0))                                                         \
      ::tessera::detail::throw_internal(__FILE__, __LINE__, #cond,                            \
                                        ::tessera::detail::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
