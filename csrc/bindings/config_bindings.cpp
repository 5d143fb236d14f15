// SchedulerConfig's Python face, generated from for_each_field: any object with the fields'
// attributes converts (engine.config.SchedulerConfig, a namespace), and the table itself is
// engine._core.scheduler_config_fields(), which engine.config builds its dataclass from.
#include <pybind11/pybind11.h>

#include <climits>
#include <string>

#include "config.hpp"

namespace py = pybind11;
using namespace steptrace;

namespace {

std::string shown(const py::handle& v) { return py::repr(v).cast<std::string>(); }

// The checks of a value's type live here; its range, in SchedulerConfig::validate().
struct FromPython {
  const py::handle& obj;

  // Any object with the fields' attributes converts; one without them is no config.
  py::object field(const char* name) const {
    if (!py::hasattr(obj, name))
      throw py::type_error("config must be a SchedulerConfig, got " +
                           py::str(py::type::handle_of(obj).attr("__name__")).cast<std::string>());
    return obj.attr(name);
  }

  // An int32 field: beyond int32, the minimum is named below it and the limit above it.
  static int32_t to_int(const char* name, const py::object& v, int32_t minimum) {
    if (py::isinstance<py::bool_>(v) || !PyIndex_Check(v.ptr()))
      throw py::value_error(std::string(name) + " must be an integer, got " + shown(v));
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(py::int_(v).ptr(), &overflow);
    if (!overflow && x >= INT32_MIN && x <= INT32_MAX) return static_cast<int32_t>(x);
    const std::string got = py::str(py::int_(v)).cast<std::string>();
    if (overflow < 0 || x < INT32_MIN)  // every minimum is above INT32_MIN
      throw py::value_error(std::string(name) + " must be >= " + std::to_string(minimum) +
                            ", got " + got);
    throw py::value_error(std::string(name) + " must be a 32-bit integer, got " + got +
                          " (at most " + std::to_string(INT32_MAX) + ")");
  }
  void integer(const char* name, int32_t& m, int32_t minimum, const char*) {
    m = to_int(name, field(name), minimum);
  }
  void optional(const char* name, int32_t& m, int32_t minimum, const char*) {
    py::object v = field(name);
    if (v.is_none()) {
      m = -1;
      return;
    }
    m = to_int(name, v, minimum);
    check_minimum(name, m, minimum);  // before -1 could pass for None
  }
  void boolean(const char* name, bool& m, const char*) {
    py::object v = field(name);
    if (!py::isinstance<py::bool_>(v))
      throw py::value_error(std::string(name) + " must be a bool, got " + shown(v));
    m = v.cast<bool>();
  }
  template <class E, size_t N>
  void choice(const char* name, E& m, const char* const (&names)[N], const char*) {
    py::object v = field(name);
    if (py::isinstance<py::str>(v))
      for (size_t i = 0; i < N; ++i)
        if (v.cast<std::string>() == names[i]) {
          m = static_cast<E>(i);
          return;
        }
    std::string allowed;
    for (size_t i = 0; i < N; ++i) allowed += (i ? ", " : "") + std::string(names[i]);
    throw py::value_error(std::string(name) + " must be one of " + allowed + "; got " + shown(v));
  }
};

// One dict per field: name, type (int | bool | str), default (None for optional ones),
// minimum, choices, doc.
struct Describe {
  py::list out;

  void add(const char* name, const char* type, py::object dflt, py::object minimum,
           py::object choices, const char* doc) {
    out.append(py::dict(py::arg("name") = name, py::arg("type") = type, py::arg("default") = dflt,
                        py::arg("minimum") = minimum, py::arg("choices") = choices,
                        py::arg("doc") = doc));
  }
  void integer(const char* name, int32_t m, int32_t minimum, const char* doc) {
    add(name, "int", py::int_(m), py::int_(minimum), py::none(), doc);
  }
  void optional(const char* name, int32_t, int32_t minimum, const char* doc) {
    add(name, "int", py::none(), py::int_(minimum), py::none(), doc);
  }
  void boolean(const char* name, bool m, const char* doc) {
    add(name, "bool", py::bool_(m), py::none(), py::none(), doc);
  }
  template <class E, size_t N>
  void choice(const char* name, E m, const char* const (&names)[N], const char* doc) {
    py::tuple choices(N);
    for (size_t i = 0; i < N; ++i) choices[i] = py::str(names[i]);
    add(name, "str", py::str(names[static_cast<size_t>(m)]), py::none(), choices, doc);
  }
};

}  // namespace

SchedulerConfig to_config(const py::handle& c) {
  SchedulerConfig cfg;
  FromPython from{c};
  for_each_field(cfg, from);
  cfg.validate();
  return cfg;
}

void bind_config(py::module_& m) {
  m.attr("MAX_SEQ_TOKENS") = kMaxSeqTokens;
  m.def(
      "scheduler_config_fields",
      [] {
        const SchedulerConfig defaults;
        Describe d;
        for_each_field(defaults, d);
        return d.out;
      },
      "SchedulerConfig's fields in declaration order: name, type, default, minimum, choices, doc.");
  m.def(
      "check_scheduler_config", [](const py::handle& c) { to_config(c); }, py::arg("config"),
      "Raise ValueError naming the field unless `config`'s attributes make a valid config.");
  m.def(
      "scheduler_config_lookahead", [](const py::handle& c) { return to_config(c).lookahead(); },
      py::arg("config"), "KV slots reserved beyond a finished prefill for the first decode steps.");
}
