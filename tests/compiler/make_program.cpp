// Writes the test program of test_programs.h to argv[1], for program_cli_test.py.
#include <cstdio>
#include <exception>

#include "tessera/compiler/program_file.h"
#include "test_programs.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fputs("usage: make_program OUT.tsr\n", stderr);
    return 2;
  }
  try {
    tessera::save(tessera::compiler::test_programs::linear_relu_program(), argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_program: %s\n", e.what());
    return 1;
  }
  return 0;
}
