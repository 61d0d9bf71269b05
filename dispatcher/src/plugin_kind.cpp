// The plugin kinds' traits table (Note [Plugin kinds] in plugin_kind.h).
#include "tessera/plugin_kind.h"

#include "tessera/error.h"
#include "tessera/plugin_abi.h"

namespace tessera {
namespace {

constexpr std::array<PluginKindTraits, 4> kPluginKinds = {{
    {
        .kind = PluginKind::Backend,
        .word = "backend",
        .device_required = "{\"type\": \"cpu\"} or {\"slot\": \"privateuse1\", \"name\": \"npu\"}",
        .provides_device = true,
        .extension = nullptr,
        .description = "a device: memory, copies, streams and the kernels that run on it",
    },
    {
        .kind = PluginKind::Compiler,
        .word = "compiler",
        .device_required = nullptr,
        .provides_device = false,
        .extension = TESSERA_EXT_COMPILER,
        .description = "claims and compiles partitions of a graph (Note [Compiler plugin ABI])",
    },
    {
        .kind = PluginKind::Quantizer,
        .word = "quantizer",
        .device_required = nullptr,
        .provides_device = false,
        .extension = TESSERA_EXT_QUANTIZER_ANNOTATE,
        .description = "annotates a graph for quantization",
    },
    // Note [Kernels plugins] (plugin_loader.cpp): kernels for an existing device type.
    {
        .kind = PluginKind::Kernels,
        .word = "kernels",
        .device_required = "the device type its kernels are for, such as {\"type\": \"cpu\"}",
        .provides_device = false,
        .extension = nullptr,
        .description = "kernels for an existing device type under a dispatch key, no device of its own",
    },
}};

constexpr bool table_is_indexed_by_kind() {
  for (size_t i = 0; i < kPluginKinds.size(); ++i)
    if (size_t(kPluginKinds[i].kind) != i) return false;
  return true;
}
static_assert(table_is_indexed_by_kind(), "kPluginKinds lists the kinds in the order of enum PluginKind");

}  // namespace

const std::array<PluginKindTraits, 4>& plugin_kinds() { return kPluginKinds; }

const PluginKindTraits& plugin_kind_traits(PluginKind kind) {
  TESSERA_INTERNAL_ASSERT(size_t(kind) < kPluginKinds.size(), "PluginKind ", int(kind), " has no traits");
  return kPluginKinds[size_t(kind)];
}

const char* plugin_kind_name(PluginKind kind) { return plugin_kind_traits(kind).word; }

std::optional<PluginKind> plugin_kind_from_word(std::string_view word) {
  for (const PluginKindTraits& t : kPluginKinds)
    if (word == t.word) return t.kind;
  return std::nullopt;
}

std::string plugin_kind_words() {
  std::string out;
  for (size_t i = 0; i < kPluginKinds.size(); ++i)
    out += std::string(i == 0 ? "" : i + 1 == kPluginKinds.size() ? " or " : ", ") + kPluginKinds[i].word;
  return out;
}

}  // namespace tessera
