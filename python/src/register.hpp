// The parts of gpuemu._core, each registered by one function (module.cpp calls them in order).
#pragma once

#include <pybind11/pybind11.h>

namespace gpuemu::python {

void register_errors(pybind11::module_& m);     // errors.cpp: GpuemuException -> gpuemu.errors
void register_dtypes(pybind11::module_& m);     // dtypes.cpp: conversions, dtype facts
void register_rng(pybind11::module_& m);        // rng.cpp: the C++ Rng, for cross-checking
void register_reference(pybind11::module_& m);  // reference.cpp: the catalogue and fp64 oracle
void register_engine(pybind11::module_& m);     // engine.cpp: fuzz, judge, minimise, calibrate
void register_client(pybind11::module_& m);     // client.cpp: Connection over DaemonClient
void register_project(pybind11::module_& m);    // project.cpp: gpuemu.toml, the CLI's reader

}  // namespace gpuemu::python
