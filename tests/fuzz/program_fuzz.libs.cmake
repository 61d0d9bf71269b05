# The program-file reader lives in the compiler library.
set(_extra_libs Tessera::compiler)
