// Where an installed gpuemu finds its data: the built-in op schemas, the shipped envelopes and the
// script runner, relative to the binary or shared object that holds this code, so that a .deb
// under /usr, a wheel in a venv and the build tree all work without environment variables.
//
//   /usr/bin/gpuemu                    -> /usr/share/gpuemu/schemas        (the .deb, make package)
//   <site-packages>/gpuemu/bin/gpuemu  -> <site-packages>/gpuemu/share/gpuemu/schemas (the wheel)
//   <site-packages>/gpuemu/_core.so    -> <site-packages>/gpuemu/share/gpuemu/schemas
//   build/bin/gpuemu, python/gpuemu/_core.so -> the source tree's schemas/ (compiled in)
//
// $GPUEMU_BUILTIN_SCHEMAS (the ops directory) and $GPUEMU_ENVELOPES still override.
#pragma once

#include <string>

namespace gpuemu {

// The directory of the executable or shared object this code was linked into (absolute; empty
// when it cannot be told).
std::string image_dir();

// The built-in schema directory (holding ops/ and envelopes.json): <image>/../share/gpuemu/schemas
// or <image>/share/gpuemu/schemas where it exists, else the source tree's schemas/.
std::string builtin_schema_dir();

// The installed data directory (<image>/../share/gpuemu or <image>/share/gpuemu) when there is
// one, else empty (a build tree).
std::string installed_data_dir();

}  // namespace gpuemu
