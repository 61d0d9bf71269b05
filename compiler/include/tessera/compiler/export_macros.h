// Symbol visibility of libtessera_compiler: everything is hidden unless marked.
#pragma once
#define TESSERA_COMPILER_API __attribute__((visibility("default")))
