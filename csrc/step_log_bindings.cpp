// engine._core.StepLog: columns leave as numpy arrays that own the moved vectors.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "step_log.hpp"

namespace py = pybind11;
using namespace steptrace;

namespace {

template <typename T>
py::array_t<T> owned(std::vector<T>&& v) {
  auto* held = new std::vector<T>(std::move(v));
  py::capsule owner(held, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(static_cast<py::ssize_t>(held->size()), held->data(), owner);
}

// A copy, and the column emptied with its capacity kept: the next chunk fills memory
// that is already mapped instead of faulting in fresh pages.
template <typename T>
py::array_t<T> drain(std::vector<T>& v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()), v.data());
  v.clear();
  return out;
}

template <typename Rows>
py::dict take(Rows& rows) {
  py::dict d;
  rows.each_column([&](const char* name, auto& column) { d[name] = drain(column); });
  return d;
}

template <typename Rows>
py::list names() {
  Rows rows;
  py::list out;
  rows.each_column([&](const char* name, auto&) { out.append(name); });
  return out;
}

template <typename T, typename F>
py::array_t<T> column(const std::vector<RequestTimes>& requests, F field) {
  std::vector<T> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) out[i] = field(requests[i]);
  return owned(std::move(out));
}

// The Python face: calls on_full() once chunk_steps steps are buffered, so that a step's
// recording is one call from Python with no Python frame of its own.
struct PyStepLog : StepLog {
  PyStepLog(const Scheduler& scheduler, int64_t warmup_steps, size_t chunk_steps,
            py::object on_full)
      : StepLog(scheduler, warmup_steps), chunk_steps(chunk_steps), on_full(std::move(on_full)) {}
  size_t chunk_steps;
  py::object on_full;
  std::vector<RankCost> costs;  // scratch, reused across record() calls
};

}  // namespace

void bind_step_log(py::module_& m) {
  py::class_<PyStepLog>(m, "StepLog")
      .def(py::init<const Scheduler&, int64_t, size_t, py::object>(), py::arg("scheduler"),
           py::arg("warmup_steps"), py::arg("chunk_steps"), py::arg("on_full"),
           py::keep_alive<1, 2>())
      .def_static("columns", [] {
        py::dict d;
        d["steps"] = names<StepRows>();
        d["batches"] = names<BatchRows>();
        return d;
      }, "The step and batch columns take_steps() and take_batches() return, by table.")
      .def("enqueue", &StepLog::enqueue, py::arg("seq_id"), py::arg("t"))
      .def("record",
           [](PyStepLog& log, const py::handle& rec, double t_start, double t_end) {
             // Names made once: an attribute lookup by C string builds a new str each time.
             static const auto& name = *new std::array<py::str, 8>{
                 "plan", "post", "sched_call_ns", "forward_ns", "sample_ns", "postprocess_ns",
                 "step_ns", "flops"};
             auto get = [&](int i) {
               PyObject* value = PyObject_GetAttr(rec.ptr(), name[i].ptr());
               if (!value) throw py::error_already_set();
               return py::reinterpret_steal<py::object>(value);
             };
             auto ns = [&](int i) {
               const int64_t v = PyLong_AsLongLong(get(i).ptr());
               if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
               return v;
             };
             py::object plan_obj = get(0), post_obj = get(1), flops_obj = get(7);
             const auto& plan = plan_obj.cast<const ScheduleOutput&>();
             const auto& post = post_obj.cast<const PostprocessOutput&>();
             const StepTimes times{t_start, t_end, ns(2), ns(3), ns(4), ns(5), ns(6)};
             py::sequence flops = flops_obj;
             if (flops.size() != plan.batches.size())
               throw py::value_error("flops has " + std::to_string(flops.size()) +
                                     " ranks; the plan has " +
                                     std::to_string(plan.batches.size()));
             std::vector<RankCost>& costs = log.costs;
             costs.clear();
             for (py::handle f : flops) {
               if (!PyTuple_Check(f.ptr()) || PyTuple_GET_SIZE(f.ptr()) != 3)
                 throw py::type_error("flops holds a (model, executed, bytes) tuple per rank");
               auto at = [&](int k) {
                 const double v = PyFloat_AsDouble(PyTuple_GET_ITEM(f.ptr(), k));
                 if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
                 return v;
               };
               costs.push_back({at(0), at(1), at(2)});
             }
             if (log.record(plan, post, times, costs) >= log.chunk_steps) log.on_full();
           },
           py::arg("record"), py::arg("t_start"), py::arg("t_end"),
           "Record an llm_engine.StepRecord that ran from t_start to t_end (the run's "
           "clock); on_full() once chunk_steps steps are buffered.")
      .def_property_readonly("num_done", &StepLog::num_done,
                             "Requests finished, handed off or rejected so far.")
      .def("take_steps", [](PyStepLog& log) { return take(log.steps()); },
           "The step rows recorded since the last take (0/1 flags as uint8).")
      .def("take_batches", [](PyStepLog& log) { return take(log.batches()); },
           "The batch rows recorded since the last take.")
      .def("requests", [](const PyStepLog& log) {
        const auto& r = log.requests();
        py::dict d;
        d["enqueue_s"] = column<double>(r, [](const RequestTimes& x) { return x.enqueue_s; });
        d["first_scheduled_s"] = column<double>(r, [](const RequestTimes& x) { return x.first_scheduled_s; });
        d["first_scheduled_step"] = column<int64_t>(r, [](const RequestTimes& x) { return x.first_scheduled_step; });
        d["first_token_s"] = column<double>(r, [](const RequestTimes& x) { return x.first_token_s; });
        d["last_token_s"] = column<double>(r, [](const RequestTimes& x) { return x.last_token_s; });
        d["tokens"] = column<int32_t>(r, [](const RequestTimes& x) { return x.tokens; });
        return d;
      }, "Per-request times, indexed as the scheduler added the sequences.")
      .def("itl", [](const PyStepLog& log) {
        std::vector<double> values;
        std::vector<int64_t> counts;
        for (const auto& [gap, count] : log.itl()) {
          values.push_back(gap);
          counts.push_back(count);
        }
        return py::make_tuple(owned(std::move(values)), owned(std::move(counts)));
      }, "(gap values ascending, counts) of measured, completed requests.");
}
