#include "tessera/error.h"

namespace tessera::detail {

void throw_error(ErrorCode code, const std::string& message) { throw Error(code, message); }

void throw_internal(const char* file, int line, const char* cond, const std::string& message) {
  throw Error(ErrorCode::Internal, str_cat("internal error (a bug in Tessera, please report it): ", cond,
                                           " failed at ", file, ":", line, message.empty() ? "" : ": ", message));
}

}  // namespace tessera::detail
