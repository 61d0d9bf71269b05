// Devices by name: privateuse renaming, plugins, device queries, streams and events.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "bindings.h"
#include "tessera/current_device.h"
#include "tessera/plugin_loader.h"

namespace tessera::python {

namespace {

using Gil = nb::gil_scoped_release;

nb::dict plugin_dict(const PluginInfo& p) {
  nb::dict d;
  d["name"] = p.name;
  d["kind"] = std::string(plugin_kind_name(p.kind));  // the manifest word: "backend", "compiler", ...
  d["version"] = p.version;
  d["status"] = std::string(plugin_status_name(p.status));
  d["reason"] = p.reason;
  d["manifest"] = p.manifest;
  d["library"] = p.library;
  d["description"] = p.description;
  d["priority"] = p.priority;
  d["device"] = p.has_device ? nb::object(nb::str(p.device_name.c_str())) : nb::none();
  d["device_slot"] = p.has_device ? nb::object(nb::int_(int(p.device_type))) : nb::none();
  return d;
}

}  // namespace

void bind_devices(nb::module_& m) {
  m.def("rename_privateuse1_backend", [](const std::string& name) { rename_privateuse1_backend(name); }, nb::arg("name"),
        "Names the privateuse1 slot (Note [PrivateUse renaming] in core/include/tessera/device.h).");
  m.def("rename_privateuse_backend", [](int slot, const std::string& name) { rename_privateuse_backend(slot, name); },
        nb::arg("slot"), nb::arg("name"));
  m.def("privateuse_backend_name", &privateuse_backend_name, nb::arg("slot") = 1,
        "The current name of privateuse slot 1..3 ('privateuse2' while unnamed).");
  m.def("known_device_names", &known_device_names);
  m.def("device_type_name", [](nb::handle d) { return device_type_name(device_arg(d).type()); });
  m.def("device_slot", [](nb::handle d) { return int(device_arg(d).type()); },
        "The DeviceType value of a device (4..6 for privateuse1..3).");
  m.def("plugins", [] {
    nb::list l;
    for (const PluginInfo& p : plugins()) l.append(plugin_dict(p));
    return l;
  }, "Every plugin manifest found (discovers on the first call), as dicts.");
  m.def("load_plugin", [](const std::string& name) {
    std::string why;
    bool ok;
    {
      Gil gil;
      ok = load_plugin(name, &why);
    }
    if (!ok) throw nb::value_error(("plugin '" + name + "' did not load: " + why).c_str());
  }, nb::arg("name"));
  m.def("load_plugins_of_kind", [](const std::string& kind) { Gil gil; load_plugins_of_kind(kind); }, nb::arg("kind"));
  m.def("devices", [] {
    std::vector<DeviceInfo> ds;
    {
      Gil gil;
      ds = devices();
    }
    nb::list l;
    for (const DeviceInfo& d : ds) {
      nb::dict e;
      e["device"] = d.device;
      e["name"] = d.name;
      e["plugin"] = d.plugin;
      e["properties"] = d.properties;
      l.append(e);
    }
    return l;
  });
  m.def("device_count", [](const std::string& type) { Gil gil; return device_count(type); }, nb::arg("type"));
  m.def("synchronize", [](nb::handle d) {
    Device dev = device_arg(d);
    Gil gil;
    synchronize(dev);
  }, nb::arg("device"));
  m.def("memory_stats", [](nb::handle d) -> nb::object {
    Device dev = device_arg(d);
    MemoryStats s;
    {
      Gil gil;
      s = memory_stats(dev);
    }
    if (!s.reported) return nb::dict();
    nb::dict r;
    r["allocated_bytes"] = s.allocated_bytes;
    r["reserved_bytes"] = s.reserved_bytes;
    r["peak_allocated_bytes"] = s.peak_allocated_bytes;
    r["num_allocations"] = s.num_allocations;
    return r;
  }, nb::arg("device"), "The device's memory statistics; {} when its plugin does not report them.");
  m.def("memory_info", [](nb::handle d) {
    Device dev = device_arg(d);
    Gil gil;
    const MemoryInfo info = memory_info(dev);
    return std::make_tuple(info.free_bytes, info.total_bytes);
  }, nb::arg("device"), "(free, total) bytes of the device's memory (torch.cuda.mem_get_info); raises when its "
                        "plugin does not report them.");
  m.def("empty_cache", [](nb::handle d) {
    Device dev = device_arg(d);
    Gil gil;
    return empty_cache(dev);
  }, nb::arg("device"));

  nb::class_<Event>(m, "Event", "A marker in a stream (libtorch's Event).")
      .def(nb::init<>())
      .def("record", [](Event& e, const Stream& s) { Gil gil; e.record(s); }, nb::arg("stream"))
      .def("synchronize", [](const Event& e) { Gil gil; e.synchronize(); })
      .def("elapsed_time", [](const Event& e, const Event& end) { Gil gil; return e.elapsed_time(end); }, nb::arg("end"))
      .def_prop_ro("is_created", &Event::is_created);
  nb::class_<Stream>(m, "Stream", "An in-order queue of work on one device (Note [Streams] in stream.h).")
      .def("__init__", [](Stream* self, nb::handle d) { new (self) Stream(device_arg(d)); }, nb::arg("device"),
           "The device's default stream.")
      .def_static("create", [](nb::handle d) {
        Device dev = device_arg(d);
        Gil gil;
        return Stream::create(dev);
      }, nb::arg("device"), "A new stream from the device's plugin.")
      .def_prop_ro("device", &Stream::device)
      .def_prop_ro("is_default", &Stream::is_default)
      .def("synchronize", [](const Stream& s) { Gil gil; s.synchronize(); })
      .def("wait_event", [](const Stream& s, const Event& e) { Gil gil; s.wait(e); }, nb::arg("event"))
      .def("record_event", [](const Stream& s, std::optional<Event> e) {
        Event ev = e.value_or(Event());
        Gil gil;
        ev.record(s);
        return ev;
      }, nb::arg("event") = nb::none())
      .def("__eq__", [](const Stream& a, const Stream& b) { return a == b; })
      .def("__repr__", &Stream::str);
  m.def("current_device", [](const std::string& type) { Gil gil; return current_device(device_type_from_name(type)); },
        nb::arg("type"), "The current device of a device type on this thread (Note [Current device]).");
  m.def("set_device", [](nb::handle d) {
    Device dev = device_arg(d);
    Gil gil;
    set_device(dev);
  }, nb::arg("device"), "Makes a device (with its index) current for its type on this thread.");
  m.def("current_stream", [](nb::handle d) { return current_stream(device_arg(d)); }, nb::arg("device"));
  m.def("set_current_stream", &set_current_stream, nb::arg("stream"));
}

}  // namespace tessera::python
