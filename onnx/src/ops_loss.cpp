// Loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), decomposed at import.
#include "convert.h"

namespace tessera::onnx::detail {

void add_loss_converters(ConverterTable& t) {
  (void)t;
}

}  // namespace tessera::onnx::detail
