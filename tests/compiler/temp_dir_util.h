// The temporary folder of a compiler test program (compile caches, debug output), registered as a
// GoogleTest environment: made under the system's temporary folder at first use, removed with
// everything in it when the tests end.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>

#include "tessera/error.h"

namespace tessera::compiler_test {

class TempDir : public ::testing::Environment {
 public:
  // The folder's name is `prefix` plus six random characters.
  explicit TempDir(std::string prefix) : prefix_(std::move(prefix)) {}

  // Thread-safe; makes the folder on the first call.
  const std::string& path() {
    std::call_once(made_, [this] {
      path_ = (std::filesystem::temp_directory_path() / (prefix_ + "XXXXXX")).string();
      TESSERA_INTERNAL_ASSERT(mkdtemp(path_.data()), "mkdtemp");
    });
    return path_;
  }

  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(path(), ec);
  }

 private:
  std::string prefix_, path_;
  std::once_flag made_;
};

// Registers a TempDir with GoogleTest (which owns it); call once, at namespace scope.
inline TempDir* add_temp_dir(std::string prefix) {
  return static_cast<TempDir*>(::testing::AddGlobalTestEnvironment(new TempDir(std::move(prefix))));
}

}  // namespace tessera::compiler_test
