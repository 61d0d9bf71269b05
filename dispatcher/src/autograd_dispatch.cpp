// The per-device backward slot of Note [Autograd dispatch] (autograd_dispatch.h): finding a plugin's
// backward kernel for an op and calling it through the C ABI.
#include "tessera/autograd_dispatch.h"

#include <atomic>
#include <deque>
#include <memory>

#include "c_tensor.h"
#include "op_registry.h"
#include "stream_state.h"
#include "tessera/plugin_loader.h"

namespace tessera {

namespace {
std::atomic<AutogradToDeviceHook> g_to_device_hook{nullptr};
}  // namespace

AutogradToDeviceHook set_autograd_to_device_hook(AutogradToDeviceHook hook) {
  return g_to_device_hook.exchange(hook, std::memory_order_acq_rel);
}
AutogradToDeviceHook detail::autograd_to_device_hook() { return g_to_device_hook.load(std::memory_order_acquire); }

const KernelEntry* device_backward_kernel(const OperatorEntry& op, DeviceType backend) {
  const int slot = int(Functionality::Autograd) * kNumBackendSlots + int(backend);
  return op.slots[size_t(slot)].load(std::memory_order_acquire);
}

bool run_device_backward(const KernelEntry& k, OperatorEntry& op, const Tensor& grad, const Stack& forward_args,
                         Device device, std::vector<Tensor>& grads) {
  grads.clear();
  if (!(k.dtype_mask & dtype_bit(grad.dtype()))) return false;
  std::vector<Tensor> inputs{grad};
  std::vector<tessera_value_t> attrs;
  std::deque<std::vector<int64_t>> lists;
  std::vector<Tensor> forward_tensors;  // the forward call's tensor inputs, in order (absent: undefined)
  for (size_t i = 0; i < op.args.size() && i < forward_args.size(); ++i) {
    const Value& v = forward_args[i];
    if (op.args[i].is_tensor) {
      TESSERA_CHECK(op.args[i].type != ArgType::TensorList, op.name,
                    ": device backward kernels do not take Tensor[] arguments yet (TODO(#31))");
      if (auto* t = std::get_if<Tensor>(&v)) forward_tensors.push_back(*t);
      else if (auto* ot = std::get_if<std::optional<Tensor>>(&v); ot && *ot) forward_tensors.push_back(**ot);
      else forward_tensors.emplace_back();
      continue;
    }
    if (auto* p = std::get_if<int64_t>(&v)) attrs.push_back(value_int(*p));
    else if (auto* d = std::get_if<double>(&v)) attrs.push_back(value_double(*d));
    else if (auto* b = std::get_if<bool>(&v)) attrs.push_back(value_bool(*b));
    else if (auto* l = std::get_if<std::vector<int64_t>>(&v)) attrs.push_back(value_ints(lists.emplace_back(*l)));
    else if (auto* s = std::get_if<std::string>(&v)) attrs.push_back(value_string(s->c_str()));
    else if (auto* t = std::get_if<DType>(&v)) attrs.push_back(value_dtype(*t));
    else attrs.push_back(value_none());
  }
  for (Tensor& t : forward_tensors) inputs.push_back(t.defined() ? t.contiguous() : t);
  for (const Tensor& t : forward_tensors) grads.push_back(t.defined() ? make_tensor(t.sizes(), t.dtype(), device) : Tensor());

  const size_t n = inputs.size() + grads.size();
  std::vector<tessera_tensor_t> views(n);
  std::vector<const tessera_tensor_t*> ptrs(n, nullptr);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) {
      detail::fill_c_tensor(views[i], inputs[i].impl());
      ptrs[i] = &views[i];
    }
  for (size_t o = 0; o < grads.size(); ++o)
    if (grads[o].defined()) {
      detail::fill_c_tensor(views[inputs.size() + o], grads[o].impl());
      ptrs[inputs.size() + o] = &views[inputs.size() + o];
    }
  tessera_kernel_call_t call;
  call.struct_size = sizeof(tessera_kernel_call_t);
  call.num_inputs = int32_t(inputs.size());
  call.num_outputs = int32_t(grads.size());
  call.num_attrs = int32_t(attrs.size());
  call.inputs = ptrs.data();
  call.outputs = ptrs.data() + inputs.size();
  call.attrs = attrs.data();
  call.op_name = op.name.c_str();
  call.device_index = device.index() < 0 ? 0 : device.index();
  call.stream = current_stream_handle(device.type(), call.device_index);
  call.reserved_ = 0;
  tessera_status_t status = k.fn(k.user_data, &call);
  if (status) {
    bool unimplemented = false;
    throw_status(status, "backward of " + op.name + " on " + device_type_name(device.type()) + " (" + k.provider + ")",
                 &unimplemented);
    if (unimplemented) {
      grads.clear();
      return false;
    }
  }
  return true;
}

}  // namespace tessera
