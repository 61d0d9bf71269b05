// A kernels plugin for the reference accelerator that offers only
// TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT (Note [Semi-structured tensors on a device]): the device
// bytes are the canonical block with its bytes in reverse order (so that a test can tell them from
// the canonical form); it answers UNIMPLEMENTED for int8 (the runtime moves the dense weight) and
// refuses float16 with an error. No kernels: linear on such a tensor takes the dense path on the
// device.
#include <cstdlib>

#include <tessera/semi_structured.h>
#include <tessera/sdk.hpp>

namespace {

tessera_status_t device_layout(void*, const tessera_semi_structured_header_t* h, void** out_block,
                               uint64_t* out_bytes) {
  if (h->dtype == TESSERA_DTYPE_INT8)
    return tessera::sdk::make_status(TESSERA_STATUS_UNIMPLEMENTED,
                                     "sparse_test_device_layout: no int8 kernels");
  if (h->dtype == TESSERA_DTYPE_FLOAT16)
    return tessera::sdk::make_status(TESSERA_STATUS_INVALID_ARGUMENT,
                                     "sparse_test_device_layout: float16 is refused");
  auto* block = static_cast<uint8_t*>(std::malloc(h->total_bytes));
  if (!block) return tessera::sdk::make_status(TESSERA_STATUS_OUT_OF_MEMORY, "out of memory");
  const auto* src = reinterpret_cast<const uint8_t*>(h);
  for (uint64_t i = 0; i < h->total_bytes; ++i) block[i] = src[h->total_bytes - 1 - i];
  *out_block = block;
  *out_bytes = h->total_bytes;
  return nullptr;
}

tessera_proc_t get_proc_address(void*, const char* name) {
  return tessera::sdk::find_extension(
      name,
      {tessera::sdk::extension(TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT,
                               static_cast<tessera_ext_semi_structured_device_layout_fn_t>(&device_layout))});
}

const tessera_plugin_t plugin_header = tessera::sdk::plugin_header(
    "sparse_test_device_layout", "0.1.0", &get_proc_address);  // no device of its own

}  // namespace

TESSERA_PLUGIN_ENTRY(&plugin_header) { (void)host; }
