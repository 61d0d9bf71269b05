// What the dispatcher knows of autocast (mixed precision): the Autocast key's hook.
// Note [Autocast dispatch]
// The Autocast functionality (dispatch_key.h) sits above Autograd, as in PyTorch: a call reaches it
// only while the thread's included key set holds it, which tessera::amp::AutocastGuard
// (libtessera_autograd, tessera/amp.h) arranges; tensors never carry the key. The hook casts the
// call's floating tensors by the op's policy for the call's device (lower precision, float32, or
// the widest of the inputs) and redispatches below the Autocast key, so that autograd records the
// casts and the op on the cast tensors. A call outside an autocast region pays nothing more than
// before: the Autocast and Autograd bits are tested together (Note [Dispatch hot path]).
#pragma once
#include "tessera/autograd_dispatch.h"

namespace tessera {

// Runs the call (below the Autocast key) and returns its outputs.
using AutocastHook = std::vector<Tensor> (*)(AutogradCall& call);
// Replaces the hook (nullptr: none) and returns the previous one. Without a hook the key falls
// through (the call runs as if autocast were off).
TESSERA_API AutocastHook set_autocast_hook(AutocastHook hook);

}  // namespace tessera
