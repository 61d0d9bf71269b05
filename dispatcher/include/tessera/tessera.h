// The one header an application includes.
#pragma once
#include "tessera/device.h"
#include "tessera/dispatch_key.h"
#include "tessera/dtype.h"
#include "tessera/memory_format.h"
#include "tessera/ops.h"
#include "tessera/options.h"
#include "tessera/profiler.h"
#include "tessera/scalar.h"
#include "tessera/sparse.h"
#include "tessera/stream.h"
#include "tessera/tensor.h"
#include "tessera/version.h"
