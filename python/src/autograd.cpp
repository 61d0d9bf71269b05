// Training from Python (tessera.autograd, tessera.optim, tessera.amp; docs/python.md "Training"):
// thin over tessera/autograd.h, tessera/nn.h (optimizers, the gradient scaler) and tessera/amp.h.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <any>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <span>

#include "bindings.h"
#if TESSERA_PY_AUTOGRAD
#include "tessera/amp.h"
#include "tessera/autograd/function.h"
#include "tessera/compiler/safetensors.h"
#include "tessera/nn.h"
#endif

namespace tessera::python {

#if TESSERA_PY_AUTOGRAD
namespace {

// Note [Python custom functions]
// tessera.autograd.Function's apply runs the class's forward (Python) with grad mode off through
// the C++ custom-function machinery (tessera/autograd/function.h): the node's backward is one C++
// function, py_function_backward, which finds the class and the Python ctx object in the context's
// saved_data and calls the class's backward with the GIL held (the engine may run it on another
// thread; the binding of backward() releases the GIL while the engine runs). The context owns the
// Python objects (PyFunctionState, whose destructor takes the GIL); the Python ctx object only
// refers back to the context weakly, so there is no reference cycle, and a ctx kept past its
// backward says so instead of touching freed memory.
struct PyFunctionState {
  nb::object cls, ctx;
  ~PyFunctionState() {
    nb::gil_scoped_acquire gil;
    cls.reset();
    ctx.reset();
  }
};
constexpr const char* kPyState = "tessera.python.function";

struct PyContext {
  std::weak_ptr<autograd::AutogradContext> ctx;
  std::shared_ptr<autograd::AutogradContext> get() const {
    std::shared_ptr<autograd::AutogradContext> c = ctx.lock();
    TESSERA_CHECK(c != nullptr, "tessera.autograd.Function: this ctx belongs to a call whose graph is gone "
                                "(a ctx is valid in forward and in its backward only)");
    return c;
  }
};

std::vector<Tensor> py_function_backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
  nb::gil_scoped_acquire gil;
  auto state = std::any_cast<std::shared_ptr<PyFunctionState>>(ctx->saved_data.at(kPyState));
  nb::list args;
  args.append(state->ctx);
  for (Tensor& g : grads) args.append(nb::cast(std::move(g)));
  nb::object r = state->cls.attr("backward")(*nb::tuple(args));
  std::vector<Tensor> out;
  auto one = [&](nb::handle h) {
    if (h.is_none()) out.emplace_back();
    else if (nb::isinstance<Tensor>(h)) out.push_back(nb::cast<Tensor>(h));
    else TESSERA_CHECK(false, ctx->name_, ": backward returned a ", nb::type_name(h.type()).c_str(),
                       "; it returns one tensor or None per forward argument");
  };
  if (nb::isinstance<nb::tuple>(r) || nb::isinstance<nb::list>(r)) for (nb::handle h : r) one(h);
  else one(r);
  const size_t want = ctx->needs_input_grad_.size();
  TESSERA_CHECK(out.size() == want, ctx->name_, ": backward returned ", out.size(), " gradients for ", want,
                " forward arguments (give None for those that need none)");
  return out;
}

}  // namespace
#endif

void bind_autograd(nb::module_& m) {
#if TESSERA_PY_AUTOGRAD
  using Gil = nb::gil_scoped_release;
  namespace ag = tessera::autograd;
  nb::module_ a = m.def_submodule("_autograd", "libtessera_autograd and libtessera_nn (docs/training.md).");
  a.attr("available") = true;
  a.def("set_requires_grad", [](const Tensor& t, bool r) { return ag::set_requires_grad(t, r); }, nb::arg("tensor"),
        nb::arg("requires_grad") = true);
  a.def("requires_grad", &ag::requires_grad, nb::arg("tensor"));
  a.def("is_leaf", &ag::is_leaf, nb::arg("tensor"));
  a.def("grad", [](const Tensor& t) -> std::optional<Tensor> {
    Tensor g = ag::grad(t);
    return g.defined() ? std::optional<Tensor>(g) : std::nullopt;
  }, nb::arg("tensor"));
  a.def("set_grad", [](const Tensor& t, std::optional<Tensor> g) { ag::set_grad(t, g ? *g : Tensor()); },
        nb::arg("tensor"), nb::arg("grad").none());
  a.def("grad_fn_name", [](const Tensor& t) -> std::optional<std::string> {
    auto fn = ag::grad_fn(t);
    return fn ? std::optional<std::string>(fn->name()) : std::nullopt;
  }, nb::arg("tensor"));
  a.def("detach", &ag::detach, nb::arg("tensor"));
  a.def("retain_grad", &ag::retain_grad, nb::arg("tensor"));
  auto defined = [](const std::vector<std::optional<Tensor>>& v) {
    std::vector<Tensor> out;
    for (const auto& t : v) out.push_back(t ? *t : Tensor());
    return out;
  };
  a.def("backward", [defined](const std::vector<Tensor>& outputs, const std::vector<std::optional<Tensor>>& grads,
                              bool retain_graph, bool create_graph) {
    std::vector<Tensor> g = defined(grads);
    Gil gil;
    ag::backward(outputs, g, retain_graph, create_graph);
  }, nb::arg("outputs"), nb::arg("grad_outputs"), nb::arg("retain_graph"), nb::arg("create_graph") = false);
  a.def("grad_of", [defined](const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                             const std::vector<std::optional<Tensor>>& grads, bool retain_graph, bool allow_unused,
                             bool create_graph) {
    std::vector<Tensor> g = defined(grads), r;
    {
      Gil gil;
      r = ag::grad(outputs, inputs, g, retain_graph, allow_unused, create_graph);
    }
    std::vector<std::optional<Tensor>> out;
    for (Tensor& t : r) out.push_back(t.defined() ? std::optional<Tensor>(std::move(t)) : std::nullopt);
    return out;
  }, nb::arg("outputs"), nb::arg("inputs"), nb::arg("grad_outputs"), nb::arg("retain_graph"), nb::arg("allow_unused"),
     nb::arg("create_graph") = false);
  a.def("is_grad_enabled", &ag::is_grad_enabled);
  a.def("cross_entropy", &nn::cross_entropy, nb::arg("logits"), nb::arg("targets"));
  a.def("mse_loss", &nn::mse_loss, nb::arg("input"), nb::arg("target"));
  a.def("clip_grad_norm_", [](const std::vector<Tensor>& params, double max_norm) {
    Gil gil;
    return nn::clip_grad_norm_(params, max_norm);
  }, nb::arg("parameters"), nb::arg("max_norm"));
  // A state dict as a safetensors file (CPU copies; the format Module::save writes) and back.
  a.def("save_safetensors", [](const std::map<std::string, Tensor>& state, const std::string& path) {
    std::map<std::string, Tensor> cpu;
    for (const auto& [name, t] : state) cpu[name] = ag::detach(t).cpu().contiguous();
    const std::vector<uint8_t> bytes = compiler::safetensors_serialize(cpu, {{"format", "tessera.nn"}});
    std::ofstream f(path, std::ios::binary);
    TESSERA_CHECK(f.good(), "tessera.nn.save(): cannot open '", path, "' for writing");
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    TESSERA_CHECK(f.good(), "tessera.nn.save(): writing '", path, "' failed");
  }, nb::arg("state"), nb::arg("path"));
  a.def("load_safetensors", [](const std::string& path) {
    std::shared_ptr<const compiler::Bytes> bytes = compiler::Bytes::map_file(path);
    return compiler::safetensors_parse(std::span<const uint8_t>(bytes->data(), bytes->size()), bytes, path).tensors;
  }, nb::arg("path"));

  // Grad-mode and autocast regions as objects whose enter/exit make and drop the C++ guard on the
  // calling thread (a `with` block runs on one thread).
  struct GradMode {
    explicit GradMode(int k) : kind(k) {}
    int kind;  // 0 no_grad, 1 enable_grad, 2 inference_mode
    std::optional<ag::NoGradGuard> no_grad;
    std::optional<ag::EnableGradGuard> enable_grad;
    std::optional<ag::InferenceMode> inference;
  };
  nb::class_<GradMode>(a, "GradMode")
      .def(nb::init<int>())
      .def("__enter__", [](GradMode& g) {
        if (g.kind == 0) g.no_grad.emplace();
        else if (g.kind == 1) g.enable_grad.emplace();
        else g.inference.emplace(true);
      })
      .def("__exit__", [](GradMode& g, nb::args) {
        g.no_grad.reset();
        g.enable_grad.reset();
        g.inference.reset();
        return false;
      });
  struct Autocast {
    DeviceType type;
    DType dtype;
    bool enabled;
    std::optional<amp::AutocastGuard> guard;
  };
  nb::class_<Autocast>(a, "Autocast")
      .def("__init__", [](Autocast* self, nb::handle device_type, nb::handle dtype, bool enabled) {
        const std::string name = nb::isinstance<nb::str>(device_type) ? nb::cast<std::string>(device_type)
                                                                       : device_type_name(device_arg(device_type).type());
        new (self) Autocast{device_type_from_name(name), dtype.is_none() ? kBFloat16 : dtype_arg(dtype), enabled, {}};
      }, nb::arg("device_type"), nb::arg("dtype").none(), nb::arg("enabled"))
      .def("__enter__", [](Autocast& c) { c.guard.emplace(c.type, c.dtype, c.enabled); })
      .def("__exit__", [](Autocast& c, nb::args) {
        c.guard.reset();
        return false;
      });
  a.def("is_autocast_enabled", [](const std::string& type) { return amp::is_autocast_enabled(device_type_from_name(type)); });

  // Optimizers and the gradient scaler.
  using nn::optim::Optimizer;
  nb::class_<Optimizer>(a, "Optimizer")
      .def("step", [](Optimizer& o) {
        Gil gil;
        o.step();
      })
      .def("zero_grad", &Optimizer::zero_grad)
      .def_prop_rw("lr", &Optimizer::lr, &Optimizer::set_lr)
      .def_prop_ro("params", &Optimizer::params);
  nb::class_<nn::optim::SGD, Optimizer>(a, "SGD")
      .def("__init__", [](nn::optim::SGD* self, std::vector<Tensor> params, double lr, double momentum, double dampening,
                          double weight_decay, bool nesterov, bool capturable, bool fused) {
        new (self) nn::optim::SGD(std::move(params), {lr, momentum, dampening, weight_decay, nesterov, capturable, fused});
      }, nb::arg("params"), nb::arg("lr"), nb::arg("momentum"), nb::arg("dampening"), nb::arg("weight_decay"),
         nb::arg("nesterov"), nb::arg("capturable") = false, nb::arg("fused") = true);
  nb::class_<nn::optim::Adam, Optimizer>(a, "Adam")
      .def("__init__", [](nn::optim::Adam* self, std::vector<Tensor> params, double lr, double beta1, double beta2,
                          double eps, double weight_decay, bool capturable, bool fused) {
        new (self) nn::optim::Adam(std::move(params), {lr, beta1, beta2, eps, weight_decay, false, capturable, fused});
      }, nb::arg("params"), nb::arg("lr"), nb::arg("beta1"), nb::arg("beta2"), nb::arg("eps"), nb::arg("weight_decay"),
         nb::arg("capturable") = false, nb::arg("fused") = true);
  nb::class_<nn::optim::AdamW, nn::optim::Adam>(a, "AdamW")
      .def("__init__", [](nn::optim::AdamW* self, std::vector<Tensor> params, double lr, double beta1, double beta2,
                          double eps, double weight_decay, bool capturable, bool fused) {
        new (self) nn::optim::AdamW(std::move(params), {lr, beta1, beta2, eps, weight_decay, true, capturable, fused});
      }, nb::arg("params"), nb::arg("lr"), nb::arg("beta1"), nb::arg("beta2"), nb::arg("eps"), nb::arg("weight_decay"),
         nb::arg("capturable") = false, nb::arg("fused") = true);
  nb::class_<nn::optim::LRScheduler>(a, "LRScheduler")
      .def("step", &nn::optim::LRScheduler::step)
      .def_prop_ro("last_epoch", &nn::optim::LRScheduler::epoch);
  nb::class_<nn::optim::StepLR, nn::optim::LRScheduler>(a, "StepLR")
      .def(nb::init<Optimizer&, int64_t, double>(), nb::arg("optimizer"), nb::arg("step_size"), nb::arg("gamma") = 0.1,
           nb::keep_alive<1, 2>());
  nb::class_<nn::optim::CosineAnnealingLR, nn::optim::LRScheduler>(a, "CosineAnnealingLR")
      .def(nb::init<Optimizer&, int64_t, double>(), nb::arg("optimizer"), nb::arg("T_max"), nb::arg("eta_min") = 0.0,
           nb::keep_alive<1, 2>());
  nb::class_<nn::optim::ExponentialLR, nn::optim::LRScheduler>(a, "ExponentialLR")
      .def(nb::init<Optimizer&, double>(), nb::arg("optimizer"), nb::arg("gamma"), nb::keep_alive<1, 2>());
  nb::class_<nn::optim::MultiStepLR, nn::optim::LRScheduler>(a, "MultiStepLR")
      .def(nb::init<Optimizer&, std::vector<int64_t>, double>(), nb::arg("optimizer"), nb::arg("milestones"),
           nb::arg("gamma") = 0.1, nb::keep_alive<1, 2>());
  nb::class_<nn::optim::LinearLR, nn::optim::LRScheduler>(a, "LinearLR")
      .def(nb::init<Optimizer&, double, double, int64_t>(), nb::arg("optimizer"), nb::arg("start_factor") = 1.0 / 3,
           nb::arg("end_factor") = 1.0, nb::arg("total_iters") = 5, nb::keep_alive<1, 2>());
  nb::class_<nn::optim::OneCycleLR, nn::optim::LRScheduler>(a, "OneCycleLR")
      .def(nb::init<Optimizer&, double, int64_t, double, bool, double, double>(), nb::arg("optimizer"),
           nb::arg("max_lr"), nb::arg("total_steps"), nb::arg("pct_start") = 0.3, nb::arg("anneal_cos") = true,
           nb::arg("div_factor") = 25.0, nb::arg("final_div_factor") = 1e4, nb::keep_alive<1, 2>());
  nb::class_<nn::optim::ReduceLROnPlateau>(a, "ReduceLROnPlateau")
      .def("__init__", [](nn::optim::ReduceLROnPlateau* self, Optimizer& opt, const std::string& mode, double factor,
                          int64_t patience, double threshold, const std::string& threshold_mode, int64_t cooldown,
                          double min_lr, double eps) {
        new (self) nn::optim::ReduceLROnPlateau(opt, {mode, factor, patience, threshold, threshold_mode, cooldown,
                                                      min_lr, eps});
      }, nb::arg("optimizer"), nb::arg("mode") = "min", nb::arg("factor") = 0.1, nb::arg("patience") = 10,
         nb::arg("threshold") = 1e-4, nb::arg("threshold_mode") = "rel", nb::arg("cooldown") = 0,
         nb::arg("min_lr") = 0.0, nb::arg("eps") = 1e-8, nb::keep_alive<1, 2>())
      .def("step", &nn::optim::ReduceLROnPlateau::step, nb::arg("metrics"))
      .def_prop_ro("last_epoch", &nn::optim::ReduceLROnPlateau::epoch)
      .def_prop_ro("num_bad_epochs", &nn::optim::ReduceLROnPlateau::num_bad_epochs)
      .def_prop_ro("best", &nn::optim::ReduceLROnPlateau::best);
  nb::class_<nn::GradScaler>(a, "GradScaler")
      .def("__init__", [](nn::GradScaler* self, double init_scale, double growth_factor, double backoff_factor,
                          int64_t growth_interval, bool enabled, bool capturable) {
        new (self) nn::GradScaler({init_scale, growth_factor, backoff_factor, growth_interval, enabled, capturable});
      }, nb::arg("init_scale"), nb::arg("growth_factor"), nb::arg("backoff_factor"), nb::arg("growth_interval"),
         nb::arg("enabled"), nb::arg("capturable"))
      .def("scale", &nn::GradScaler::scale, nb::arg("loss"))
      .def("unscale_", &nn::GradScaler::unscale_, nb::arg("optimizer"))
      .def("step", &nn::GradScaler::step, nb::arg("optimizer"))
      .def("update", &nn::GradScaler::update)
      .def("get_scale", &nn::GradScaler::get_scale)
      .def_prop_ro("found_inf", &nn::GradScaler::found_inf)
      .def_prop_ro("growth_tracker", &nn::GradScaler::growth_tracker)
      .def("is_enabled", &nn::GradScaler::is_enabled);

  // Custom functions (Note [Python custom functions]).
  nb::class_<PyContext>(a, "FunctionCtx", nb::dynamic_attr())
      .def("save_for_backward", [](PyContext& c, nb::args tensors) {
        std::vector<Tensor> ts;
        for (nb::handle h : tensors) ts.push_back(nb::cast<Tensor>(h));
        c.get()->save_for_backward(std::move(ts));
      })
      .def_prop_ro("saved_tensors", [](PyContext& c) {
        nb::list l;
        for (Tensor& t : c.get()->get_saved_variables()) l.append(nb::cast(std::move(t)));
        return nb::tuple(l);
      })
      .def("mark_non_differentiable", [](PyContext& c, nb::args tensors) {
        std::vector<Tensor> ts;
        for (nb::handle h : tensors) ts.push_back(nb::cast<Tensor>(h));
        c.get()->mark_non_differentiable(ts);
      })
      .def("mark_dirty", [](PyContext& c, nb::args tensors) {
        std::vector<Tensor> ts;
        for (nb::handle h : tensors) ts.push_back(nb::cast<Tensor>(h));
        c.get()->mark_dirty(ts);
      })
      .def_prop_ro("needs_input_grad", [](PyContext& c) {
        nb::list l;
        const auto ctx = c.get();
        for (size_t i = 0; i < ctx->needs_input_grad_.size(); ++i) l.append(ctx->needs_input_grad(i));
        return nb::tuple(l);
      });
  a.def("function_apply", [](nb::object cls, nb::args args) {
    autograd::detail::FunctionCall call;
    for (nb::handle h : args) {
      const bool tensor = nb::isinstance<Tensor>(h);
      call.tensor_args.push_back(tensor ? nb::cast<Tensor>(h) : Tensor());
      call.is_tensor.push_back(tensor);
    }
    const std::string name = nb::cast<std::string>(cls.attr("__name__"));
    std::shared_ptr<autograd::AutogradContext> ctx = autograd::detail::function_prepare(call, name.c_str());
    auto state = std::make_shared<PyFunctionState>();
    state->cls = cls;
    state->ctx = nb::cast(PyContext{ctx});
    ctx->saved_data[kPyState] = state;
    nb::list fargs;
    fargs.append(state->ctx);
    for (nb::handle h : args) fargs.append(h);
    nb::object r;
    {
      ag::NoGradGuard no_grad;
      r = cls.attr("forward")(*nb::tuple(fargs));
    }
    const bool single = nb::isinstance<Tensor>(r);
    std::vector<Tensor> outputs;
    if (single) outputs.push_back(nb::cast<Tensor>(r));
    else for (nb::handle h : r) outputs.push_back(nb::cast<Tensor>(h));
    outputs = autograd::detail::function_finish(call, std::move(ctx), std::move(outputs), &py_function_backward);
    if (single) return nb::cast(outputs[0]);
    nb::list l;
    for (Tensor& t : outputs) l.append(nb::cast(std::move(t)));
    return nb::object(nb::tuple(l));
  }, nb::arg("cls"), nb::arg("args"));
#else
  nb::module_ a = m.def_submodule("_autograd", "libtessera_autograd / libtessera_nn were not built.");
  a.attr("available") = false;
#endif
}

}  // namespace tessera::python
