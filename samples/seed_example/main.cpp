// The seed example: a third-party device by name, as an application sees it.
//   tessera::rename_privateuse1_backend("my_hardware_device");
//   auto x = tessera::randn({2, 3}, tessera::device("my_hardware_device"));
//   auto y = x + x;
// Checks that the accelerator's own add kernel ran (its kernel counter, from the device properties,
// went up) and that y equals 2 * x on the CPU. Exit status 0 on success.
#include <cmath>
#include <cstdio>
#include <string>

#include <tessera/tessera.h>

namespace {

// Reads "add.Tensor": N out of the device's properties JSON ({"kernel_counts": {...}}).
long long add_kernel_count() {
  for (const tessera::DeviceInfo& d : tessera::devices()) {
    if (!d.device.is_cpu() && d.name == "my_hardware_device:0") {
      const std::string key = "\"add.Tensor\": ";
      const size_t pos = d.properties.find(key);
      return pos == std::string::npos ? -1 : std::stoll(d.properties.substr(pos + key.size()));
    }
  }
  return -1;
}

}  // namespace

int main() {
  try {
    // Optional: the plugin's manifest gives privateuse1 this name too; renaming to the same name is a no-op.
    tessera::rename_privateuse1_backend("my_hardware_device");
    auto x = tessera::randn({2, 3}, tessera::device("my_hardware_device"));
    const long long before = add_kernel_count();
    auto y = x + x;
    const long long after = add_kernel_count();

    std::printf("x = %s\ny = x + x = %s\n", tessera::to_string(x).c_str(), tessera::to_string(y).c_str());
    std::printf("add.Tensor kernels on my_hardware_device:0: %lld -> %lld\n", before, after);
    if (!y.is("my_hardware_device") || after != before + 1) {
      std::fprintf(stderr, "seed_example: the accelerator's add kernel did not run\n");
      return 1;
    }
    tessera::Tensor xc = x.to("cpu"), yc = y.to("cpu");
    const float* px = xc.data_ptr<float>();
    const float* py = yc.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) {
      if (std::fabs(py[i] - 2 * px[i]) > 0) {
        std::fprintf(stderr, "seed_example: y[%lld] = %g, expected %g\n", (long long)i, py[i], 2 * px[i]);
        return 1;
      }
    }
    std::printf("ok: y == 2 * x\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seed_example: %s\n", e.what());
    return 1;
  }
}
