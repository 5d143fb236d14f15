// _core._spin(ns, release_gil): a C++ call that keeps a core busy for `ns` nanoseconds,
// with the GIL released or held, as schedule() can be called. For tests only: it lets a
// test give the engine's thread a long C++ call of known length and GIL mode.
#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace py = pybind11;

namespace {

void spin(int64_t ns) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < deadline) {
  }
}

}  // namespace

void bind_spin(py::module_& m) {
  m.def(
      "_spin",
      [](int64_t ns, bool release_gil) {
        if (ns < 0) throw py::value_error("ns must be >= 0, got " + std::to_string(ns));
        std::optional<py::gil_scoped_release> nogil;
        if (release_gil) nogil.emplace();
        spin(ns);
      },
      py::arg("ns"), py::arg("release_gil") = true,
      "Test only: spin for ns nanoseconds in C++, the GIL released unless release_gil=False.");
}
