// gpuemu._core.Connection: the C++ DaemonClient (include/gpuemu/client.hpp) for the Python Client
// (python/gpuemu/client.py). Frames cross as (header JSON text, tensor tuples): request tensors are
// read through the buffer protocol and copied once into the frame; reply tensors come back as
// uint8 numpy arrays sharing the decoded frame's storage (no copy). The GIL is released while a
// request is on the wire.
#include "convert.hpp"
#include "register.hpp"

#include "gpuemu/client.hpp"
#include "gpuemu/malloc_tuning.hpp"

#include <pybind11/stl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace gpuemu::python {
namespace {

std::chrono::milliseconds millis(double seconds) {
  // <= 0 means no limit (DaemonClient passes NNG_DURATION_INFINITE).
  return std::chrono::milliseconds(seconds <= 0 ? 0 : static_cast<std::int64_t>(seconds * 1000.0));
}

// The storage bytes of any object with the buffer protocol (bytes, bytearray, memoryview, a
// C-contiguous numpy array), copied once.
std::shared_ptr<std::vector<std::byte>> storage_of(py::handle obj, const std::string& key) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
    PyErr_Clear();
    throw_error(ErrorCode::invalid_argument,
                "tensor '" + key + "': the storage must be a C-contiguous buffer (bytes, "
                "bytearray, memoryview, numpy array)");
  }
  const auto* b = static_cast<const std::byte*>(view.buf);
  auto storage = std::make_shared<std::vector<std::byte>>(b, b + view.len);  // one copy, no fill
  PyBuffer_Release(&view);
  return storage;
}

protocol::Frame frame_of(const std::string& header_json, const py::list& tensors) {
  protocol::Frame f;
  try {
    f.header = Json::parse(header_json);
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::invalid_argument, std::string("request header: ") + e.what());
  }
  for (py::handle item : tensors) {
    auto t = item.cast<py::tuple>();
    if (t.size() != 6)
      throw_error(ErrorCode::invalid_argument,
                  "each tensor is (key, dtype, shape, strides, offset, storage)");
    auto key = t[0].cast<std::string>();
    DType dtype = dtype_from_name(t[1].cast<std::string>());
    auto shape = t[2].cast<std::vector<std::int64_t>>();
    auto strides = t[3].cast<std::vector<std::int64_t>>();
    auto offset = t[4].cast<std::int64_t>();
    auto storage = storage_of(t[5], key);
    auto tensor = Tensor::view(dtype, Shape(shape.begin(), shape.end()), std::move(strides), offset,
                               std::move(storage));
    if (!tensor)
      throw_error(tensor.error().code, "tensor '" + key + "': " + tensor.error().message);
    f.add(std::move(key), std::move(tensor).value());
  }
  return f;
}

// A uint8 numpy array over a reply tensor's whole storage, keeping the storage alive.
py::array storage_array(const Tensor& t) {
  auto* holder = new std::shared_ptr<std::vector<std::byte>>(t.storage());
  py::capsule owner(holder, [](void* p) {
    delete static_cast<std::shared_ptr<std::vector<std::byte>>*>(p);
  });
  const auto n = static_cast<py::ssize_t>((*holder) ? (*holder)->size() : 0);
  auto* data = (*holder && n > 0) ? reinterpret_cast<std::uint8_t*>((*holder)->data()) : nullptr;
  static std::uint8_t empty = 0;
  return py::array_t<std::uint8_t>({n}, {py::ssize_t{1}}, data ? data : &empty, owner);
}

class Connection {
 public:
  Connection(const std::optional<std::string>& home, const std::optional<std::string>& url,
             bool autostart, double timeout_s, const std::optional<std::string>& daemon_path,
             double start_timeout_s, const std::optional<std::string>& token_file) {
    // A chunk of cases is megabytes: a 6 MiB request took 58 ms in page faults, 12 ms with this
    // (docs/python.md, docs/performance.md).
    tune_malloc_for_cases(MallocTuning::unless_environment_says);
    ClientOptions o;
    o.home = home.value_or("");
    o.url = url.value_or("");
    o.autostart = autostart;
    o.timeout = millis(timeout_s);
    o.start_timeout = millis(start_timeout_s);
    o.daemon_path = daemon_path.value_or("");
    o.token_file = token_file.value_or("");
    Result<std::unique_ptr<DaemonClient>> c = make_error(ErrorCode::internal, "not connected");
    {
      py::gil_scoped_release nogil;
      c = DaemonClient::connect(o);
    }
    if (!c) {
      Error e = c.error();
      // A daemon that cannot be started is a connection failure to the caller.
      if (e.code == ErrorCode::tool_missing) e.code = ErrorCode::unavailable;
      throw GpuemuException(e);
    }
    m_client = std::move(c).value();
  }

  py::tuple call(const std::string& header_json, const py::list& tensors,
                 std::optional<double> timeout_s) {
    protocol::Frame request = frame_of(header_json, tensors);
    std::optional<std::chrono::milliseconds> t;
    if (timeout_s) t = millis(*timeout_s);
    Result<protocol::Frame> reply = make_error(ErrorCode::internal, "no reply");
    {
      py::gil_scoped_release nogil;
      reply = m_client->call(std::move(request), t);
    }
    if (!reply) throw GpuemuException(reply.error());
    py::list out;
    for (const auto& [key, tensor] : reply->tensors)
      out.append(py::make_tuple(key, std::string(dtype_name(tensor.dtype())), tensor.shape(),
                                tensor.strides(), tensor.offset(), storage_array(tensor)));
    return py::make_tuple(reply->header.dump(), out);
  }

  py::object hello() const { return py_from_json(m_client->hello()); }
  const std::string& url() const { return m_client->url(); }
  bool started_daemon() const { return m_client->started_daemon(); }

 private:
  std::unique_ptr<DaemonClient> m_client;
};

}  // namespace

void register_client(py::module_& m) {
  py::class_<Connection>(m, "Connection")
      .def(py::init<const std::optional<std::string>&, const std::optional<std::string>&, bool,
                    double, const std::optional<std::string>&, double,
                    const std::optional<std::string>&>(),
           py::arg("home") = py::none(), py::arg("socket_url") = py::none(),
           py::arg("autostart") = true, py::arg("timeout_s") = 600.0,
           py::arg("daemon_path") = py::none(), py::arg("start_timeout_s") = 20.0,
           py::arg("token_file") = py::none())
      .def("call", &Connection::call, py::arg("header"), py::arg("tensors") = py::list(),
           py::arg("timeout_s") = py::none(),
           "Sends one request frame; returns (reply header JSON, [(key, dtype, shape, strides, "
           "offset, storage as a uint8 array)])")
      .def_property_readonly("hello", &Connection::hello)
      .def_property_readonly("url", &Connection::url)
      .def_property_readonly("started_daemon", &Connection::started_daemon);
  // The wire's version, from include/gpuemu/protocol.hpp: the one place it is written.
  m.attr("PROTOCOL_VERSION") = protocol::k_protocol_version;
  m.def("find_daemon_binary", &find_daemon_binary,
        "The gpuemu-daemon a client would start ('' when none is found)");
}

}  // namespace gpuemu::python
