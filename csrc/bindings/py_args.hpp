// Python arguments as the bindings take them, checked by name before any reaches the core.
// An integer refuses bool and anything without __index__, and values beyond int64; a
// number refuses bool, text and NaN/inf; a flag refuses anything but a bool (Python's or
// numpy's); an integer sequence refuses floats and bools, in an array (its dtype) or element
// by element. Each refusal is a ValueError naming the argument and the value, worded exactly
// as engine/arguments.py words it for the reference scheduler, so that both implementations
// refuse alike (tests/test_differential.py).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace steptrace::py_args {

namespace py = pybind11;

// repr(v), cut to 100 characters.
inline std::string shown(py::handle v) {
  py::str r = py::repr(v);
  if (py::len(r) > 100) r = py::str(r[py::slice(0, 97, 1)]) + py::str("...");
  return r.cast<std::string>();
}

inline bool is_bool(py::handle v) {
  const char* type = Py_TYPE(v.ptr())->tp_name;  // numpy.bool (numpy.bool_ before NumPy 2)
  return PyBool_Check(v.ptr()) || std::strcmp(type, "numpy.bool") == 0 ||
         std::strcmp(type, "numpy.bool_") == 0;
}

// A sequence of items to check one by one: not text, not a mapping.
inline bool is_sequence(py::handle v) {
  return PySequence_Check(v.ptr()) && !PyUnicode_Check(v.ptr()) && !PyBytes_Check(v.ptr()) &&
         !PyByteArray_Check(v.ptr());
}

enum class IntCheck { kOk, kNotInteger, kNot64Bit };

inline IntCheck to_int64(py::handle v, int64_t& out) {
  if (PyLong_CheckExact(v.ptr())) {  // the common case: no conversion
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    return overflow ? IntCheck::kNot64Bit : IntCheck::kOk;
  }
  if (is_bool(v) || !PyIndex_Check(v.ptr())) return IntCheck::kNotInteger;
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  out = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (!overflow && out == -1 && PyErr_Occurred()) throw py::error_already_set();
  return overflow ? IntCheck::kNot64Bit : IntCheck::kOk;
}

[[noreturn]] inline void refuse_int(const std::string& name, py::handle v, IntCheck why) {
  if (why == IntCheck::kNotInteger)
    throw py::value_error(name + " must be an integer, got " + shown(v));
  throw py::value_error(
      name + " must be a 64-bit integer, got " +
      py::str(py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()))).cast<std::string>());
}

inline int64_t integer(const char* name, py::handle v,
                       int64_t minimum = std::numeric_limits<int64_t>::min()) {
  int64_t x = 0;
  const IntCheck why = to_int64(v, x);
  if (why != IntCheck::kOk) refuse_int(name, v, why);
  if (x < minimum)
    throw py::value_error(std::string(name) + " must be >= " + std::to_string(minimum) + ", got " +
                          std::to_string(x));
  return x;
}

inline double finite(const char* name, py::handle v) {
  const PyNumberMethods* nb = Py_TYPE(v.ptr())->tp_as_number;
  if (is_bool(v) || !nb || (!nb->nb_float && !nb->nb_index))
    throw py::value_error(std::string(name) + " must be a number, got " + shown(v));
  double x = PyFloat_AsDouble(v.ptr());
  if (x == -1.0 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw py::error_already_set();
    PyErr_Clear();  // an integer beyond a double: as infinite
    x = std::numeric_limits<double>::infinity();
  }
  if (!std::isfinite(x))
    throw py::value_error(std::string(name) + " must be finite, got " + shown(v));
  return x;
}

inline bool boolean(const char* name, py::handle v) {
  if (!is_bool(v)) throw py::value_error(std::string(name) + " must be a bool, got " + shown(v));
  return PyObject_IsTrue(v.ptr()) == 1;
}

// Appends the integers of `v` (an integer array, or a sequence whose items are integers or
// nested lists, tuples and arrays), flattened, to `out`.
inline void append_integers(const std::string& name, py::handle v, std::vector<int64_t>& out,
                            bool top = true) {
  if (py::isinstance<py::array>(v)) {
    py::array a = py::reinterpret_borrow<py::array>(v);
    const char kind = a.dtype().kind();
    if (a.size() == 0) return;
    if (kind != 'i' && kind != 'u')
      throw py::value_error(name + " must hold integers, got an array of " +
                            py::str(a.dtype()).cast<std::string>());
    if (kind == 'u' && a.itemsize() == 8) {
      auto u = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
      for (py::ssize_t i = 0; i < u.size(); ++i)
        if (u.data()[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          throw py::value_error(name + "[" + std::to_string(i) +
                                "] must be a 64-bit integer, got " + std::to_string(u.data()[i]));
    }
    auto i64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    out.insert(out.end(), i64.data(), i64.data() + i64.size());
    return;
  }
  if (top && !is_sequence(v))
    throw py::value_error(name + " must be None or a sequence of integers, got " + shown(v));
  size_t i = 0;
  for (py::handle x : v) {
    if (py::isinstance<py::list>(x) || py::isinstance<py::tuple>(x) ||
        py::isinstance<py::array>(x)) {
      append_integers(name + "[" + std::to_string(i) + "]", x, out, false);
    } else {
      int64_t value = 0;
      const IntCheck why = to_int64(x, value);
      if (why != IntCheck::kOk) refuse_int(name + "[" + std::to_string(i) + "]", x, why);
      out.push_back(value);
    }
    ++i;
  }
}

inline std::vector<int64_t> integers(const std::string& name, py::handle v) {
  std::vector<int64_t> out;
  append_integers(name, v, out);
  return out;
}

}  // namespace steptrace::py_args
