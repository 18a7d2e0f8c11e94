// gpuemu._core.Connection: the C++ DaemonClient (gpuemu/protocol/client.hpp) for the Python Client
// (python/gpuemu/client.py). Frames cross as (header JSON text, tensor tuples): request tensors are
// read through the buffer protocol and copied once into the frame, or, when large and shared
// memory is on, into an arena; reply tensors come back as uint8 numpy arrays sharing the decoded
// frame's storage or the reply arena (no copy). The GIL is released while a request is on the wire.
#include "convert.hpp"
#include "register.hpp"

#include "gpuemu/protocol/client.hpp"
#include "gpuemu/engine/malloc_tuning.hpp"

#include <pybind11/stl.h>

#include <unistd.h>

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

// The request frame of (header, tensors). With shared memory on, storages of at least the
// threshold are copied from their buffers straight into one arena of the connection's pool (one
// copy in all; docs/protocol.md, "Shared memory"); the rest are copied once into the frame.
protocol::Frame frame_of(const std::string& header_json, const py::list& tensors,
                         DaemonClient& client) {
  protocol::Frame f;
  try {
    f.header = Json::parse(header_json);
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::invalid_argument, std::string("request header: ") + e.what());
  }
  struct Item {
    std::string key;
    DType dtype;
    Shape shape;
    std::vector<std::int64_t> strides;
    std::int64_t offset;
    py::handle storage;
  };
  std::vector<Item> items;
  std::size_t large = 0;
  const std::size_t min_bytes = client.shm_enabled() ? client.shm_min_bytes() : SIZE_MAX;
  const auto buffer_len = [](py::handle obj) -> std::size_t {
    Py_buffer view;
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      return 0;  // storage_of says what is wrong with it
    }
    const auto n = static_cast<std::size_t>(view.len);
    PyBuffer_Release(&view);
    return n;
  };
  for (py::handle item : tensors) {
    auto t = item.cast<py::tuple>();
    if (t.size() != 6)
      throw_error(ErrorCode::invalid_argument,
                  "each tensor is (key, dtype, shape, strides, offset, storage)");
    auto shape = t[2].cast<std::vector<std::int64_t>>();
    items.push_back({t[0].cast<std::string>(), dtype_from_name(t[1].cast<std::string>()),
                     Shape(shape.begin(), shape.end()), t[3].cast<std::vector<std::int64_t>>(),
                     t[4].cast<std::int64_t>(), t[5]});
    const std::size_t n = buffer_len(t[5]);
    if (n >= min_bytes) large += (n + 63) / 64 * 64;
  }
  std::shared_ptr<shm::Arena> arena = large > 0 ? client.shm_arena(large) : nullptr;
  std::size_t used = 0;
  for (Item& it : items) {
    Py_buffer view;
    if (arena && PyObject_GetBuffer(it.storage.ptr(), &view, PyBUF_C_CONTIGUOUS) == 0) {
      const auto n = static_cast<std::size_t>(view.len);
      if (n >= min_bytes && used + n <= arena->size()) {
        std::memcpy(arena->data() + used, view.buf, n);
        PyBuffer_Release(&view);
        // The view is checked by the daemon when it decodes, as an inline one is.
        protocol::SharedTensor st;
        st.dtype = it.dtype;
        st.shape = it.shape;
        st.strides = it.strides;
        st.offset = it.offset;
        st.bytes = std::span(arena->data() + used, n);
        st.ref = {static_cast<std::int64_t>(::getpid()), arena->fd(), arena->size(), used};
        st.keep = arena;
        f.shared.insert_or_assign(std::move(it.key), std::move(st));
        used = (used + n + 63) / 64 * 64;
        continue;
      }
      PyBuffer_Release(&view);
    }
    auto storage = storage_of(it.storage, it.key);
    auto tensor = Tensor::view(it.dtype, std::move(it.shape), std::move(it.strides), it.offset,
                               std::move(storage));
    if (!tensor)
      throw_error(tensor.error().code, "tensor '" + it.key + "': " + tensor.error().message);
    f.add(std::move(it.key), std::move(tensor).value());
  }
  return f;
}

// A uint8 numpy array over a reply tensor's whole storage, keeping the storage alive.
py::array storage_array(const Tensor& t) {
  auto* holder = new std::shared_ptr<Storage>(t.storage());
  py::capsule owner(holder, [](void* p) {
    delete static_cast<std::shared_ptr<Storage>*>(p);
  });
  const auto n = static_cast<py::ssize_t>((*holder) ? (*holder)->size() : 0);
  auto* data = (*holder && n > 0) ? reinterpret_cast<std::uint8_t*>((*holder)->data()) : nullptr;
  static std::uint8_t empty = 0;
  return py::array_t<std::uint8_t>({n}, {py::ssize_t{1}}, data ? data : &empty, owner);
}

// A uint8 numpy array over a reply tensor's bytes in the reply arena (no copy): the array holds
// the arena, which its pool lends to no other request until every such array is gone.
py::array shared_array(const protocol::SharedTensor& t) {
  auto* holder = new std::shared_ptr<void>(t.keep);
  py::capsule owner(holder, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  static std::uint8_t empty = 0;
  auto* data = t.bytes.empty() ? &empty : reinterpret_cast<std::uint8_t*>(t.bytes.data());
  return py::array_t<std::uint8_t>({static_cast<py::ssize_t>(t.bytes.size())}, {py::ssize_t{1}},
                                   data, owner);
}

class Connection {
 public:
  Connection(const std::optional<std::string>& home, const std::optional<std::string>& url,
             bool autostart, double timeout_s, const std::optional<std::string>& daemon_path,
             double start_timeout_s, const std::optional<std::string>& token_file) {
    // A chunk of cases is megabytes: a 6 MiB request took 58 ms in page faults, 12 ms with this
    // (docs/python.md, evidence/race/history.md).
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
    protocol::Frame request = frame_of(header_json, tensors, *m_client);
    std::optional<std::chrono::milliseconds> t;
    if (timeout_s) t = millis(*timeout_s);
    Result<protocol::Frame> reply = make_error(ErrorCode::internal, "no reply");
    {
      py::gil_scoped_release nogil;
      reply = m_client->call(std::move(request), t, /*keep_shared=*/true);
    }
    if (!reply) throw GpuemuException(reply.error());
    py::list out;
    for (const auto& [key, tensor] : reply->tensors)
      out.append(py::make_tuple(key, std::string(dtype_name(tensor.dtype())), tensor.shape(),
                                tensor.strides(), tensor.offset(), storage_array(tensor)));
    for (const auto& [key, tensor] : reply->shared)
      out.append(py::make_tuple(key, std::string(dtype_name(tensor.dtype)), tensor.shape,
                                tensor.strides, tensor.offset, shared_array(tensor)));
    return py::make_tuple(reply->header.dump(), out);
  }

  py::object hello() const { return py_from_json(m_client->hello()); }
  const std::string& url() const { return m_client->url(); }
  bool started_daemon() const { return m_client->started_daemon(); }
  py::dict shm() const {
    const auto c = m_client->shm_counters();
    py::dict d;
    d["enabled"] = m_client->shm_enabled();
    d["status"] = m_client->shm_status();
    d["min_bytes"] = m_client->shm_min_bytes();
    d["sent_bytes"] = c.sent_bytes;
    d["sent_tensors"] = c.sent_tensors;
    d["received_bytes"] = c.received_bytes;
    d["received_tensors"] = c.received_tensors;
    d["arenas"] = c.arenas;
    d["mapped_bytes"] = c.mapped_bytes;
    return d;
  }

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
      .def_property_readonly("started_daemon", &Connection::started_daemon)
      .def_property_readonly("shm", &Connection::shm,
                             "The shared-memory hand-off: enabled, status, min_bytes, and the "
                             "bytes and tensors sent and received through arenas so far");
  // The wire's version, from gpuemu/protocol/protocol.hpp: the one place it is written.
  m.attr("PROTOCOL_VERSION") = protocol::k_protocol_version;
  m.def("find_daemon_binary", &find_daemon_binary,
        "The gpuemu-daemon a client would start ('' when none is found)");
}

}  // namespace gpuemu::python
