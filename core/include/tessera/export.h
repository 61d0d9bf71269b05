// Symbol visibility: everything is hidden unless marked TESSERA_API.
#pragma once
#if defined(TESSERA_BUILDING_LIBRARY)
#define TESSERA_API __attribute__((visibility("default")))
#else
#define TESSERA_API __attribute__((visibility("default")))
#endif
