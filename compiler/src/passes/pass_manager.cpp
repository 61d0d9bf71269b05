// Note [Passes] in tessera/compiler/passes.h.
#include "tessera/compiler/passes.h"

namespace tessera::compiler {

PassManager& PassManager::add(std::string name, Pass pass) {
  TESSERA_CHECK(bool(pass), "PassManager::add('", name, "'): the pass is empty");
  passes_.emplace_back(std::move(name), std::move(pass));
  return *this;
}

PassManager PassManager::default_pipeline() {
  PassManager pm;
  pm.add("decompose", decompose)
      .add("eliminate_common_subexpressions", eliminate_common_subexpressions)
      .add("fold_constants", fold_constants)
      .add("eliminate_common_subexpressions", eliminate_common_subexpressions)
      .add("eliminate_dead_code", eliminate_dead_code);
  return pm;
}

bool PassManager::run(ExportedProgram& ep) const {
  bool changed = false;
  for (const auto& [name, pass] : passes_) {
    changed = pass(ep) || changed;
    try {
      verify(ep);
    } catch (const Error& e) {
      detail::throw_error(e.code(), "pass '" + name + "' left a broken program: " + e.what());
    }
  }
  return changed;
}

}  // namespace tessera::compiler
