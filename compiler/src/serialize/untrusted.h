// Messages about file contents (Note [Untrusted text] in tessera/text_escape.h): names and fields
// read from a file may hold control characters; each public reader rethrows its errors with the
// message made printable, so that every message stays one line.
#pragma once
#include <utility>

#include "tessera/error.h"
#include "tessera/text_escape.h"

namespace tessera::compiler {

template <typename F>
auto with_printable_errors(F&& f) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    throw Error(e.code(), printable_text(e.what()));
  }
}

}  // namespace tessera::compiler
