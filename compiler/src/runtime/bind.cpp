// Note [Binding symbols] in bind.h.
#include "runtime/bind.h"

#include "tessera/error.h"

namespace tessera::compiler {

void bind_symbols(const TensorType& type, IntArrayRef sizes, const std::string& what, Bindings& bindings) {
  TESSERA_CHECK(sizes.size() == type.sizes.size(), what, " has ", sizes.size(), " dimensions, the program expects ",
                type.sizes.size(), " (", type.str(), ")");
  for (size_t d = 0; d < type.sizes.size(); ++d) {
    std::optional<std::string> name = type.sizes[d].plain_symbol();
    if (!name) continue;
    auto [it, fresh] = bindings.emplace(*name, sizes[d]);
    TESSERA_CHECK(fresh || it->second == sizes[d], what, " has size ", sizes[d], " at dimension ", d, " but ", *name,
                  " is ", it->second, " from an earlier input; dims of the same Dim must be equal");
  }
}

Bindings bind_user_inputs(const ExportedProgram& program, const std::vector<Tensor>& inputs) {
  Bindings bindings;
  size_t k = 0;
  for (const InputSpec& in : program.signature.inputs) {
    if (in.kind != InputKind::UserInput) continue;
    const Tensor& x = inputs.at(k++);
    bind_symbols(program.graph.type(in.value), x.sizes(), "input '" + in.name + "'", bindings);
  }
  return bindings;
}

}  // namespace tessera::compiler
