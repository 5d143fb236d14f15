// engine._core.StepLog: columns leave as numpy arrays that own the moved vectors.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "deployment_model.hpp"
#include "py_step_log.hpp"
#include "recorder/step_log.hpp"

namespace py = pybind11;
using namespace steptrace;

namespace {

template <typename T>
py::array_t<T> owned(std::vector<T>&& v) {
  auto* held = new std::vector<T>(std::move(v));
  py::capsule owner(held, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(static_cast<py::ssize_t>(held->size()), held->data(), owner);
}

// The column moved out, and room for as many rows reserved: a flush runs on the engine's
// thread, so it copies nothing; the next chunk faults its pages in as it fills them, and
// never reallocates mid-chunk.
template <typename T>
py::array_t<T> drain(std::vector<T>& v) {
  const size_t rows = v.size();
  py::array_t<T> out = owned(std::move(v));
  v = std::vector<T>();
  v.reserve(rows);
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

py::dict take_requests(RequestRows& rows) {
  py::dict d = take(rows);
  py::list reason(rows.reason.size());
  for (size_t i = 0; i < rows.reason.size(); ++i) reason[i] = py::str(rows.reason[i]);
  rows.reason.clear();
  d["reason"] = reason;
  return d;
}

// A step's costs, one per rank: a deployment's StepCosts (no object per rank) or a sequence
// of StepCost.
void collect_costs(const py::object& flops, std::vector<StepCost>& costs) {
  costs.clear();
  if (py::isinstance<StepCosts>(flops)) {
    const auto& ranks = flops.cast<const StepCosts&>().ranks;
    costs.assign(ranks.begin(), ranks.end());
    return;
  }
  for (py::handle f : py::reinterpret_borrow<py::sequence>(flops)) {
    if (!py::isinstance<StepCost>(f))
      throw py::type_error("flops holds a StepCost per rank, got " +
                           py::repr(f).cast<std::string>());
    costs.push_back(f.cast<const StepCost&>());
  }
}

// One StepRecord into the log: its plan, postprocess result, times (an engine._core.StepTimes)
// and costs, read by attribute (names made once: a lookup by C string builds a new str each
// time); first on_full() when a chunk is buffered, its time the step's flush_ns.
void record_step(PyStepLog& log, const py::handle& rec, double t_start, double t_end) {
  const Recording recording(log);
  static const auto& name = *new std::array<py::str, 4>{"plan", "post", "times", "flops"};
  auto get = [&](int i) {
    PyObject* value = PyObject_GetAttr(rec.ptr(), name[i].ptr());
    if (!value) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(value);
  };
  py::object plan_obj = get(0), post_obj = get(1), times_obj = get(2);
  if (!py::isinstance<ScheduleOutput>(plan_obj) || !py::isinstance<PostprocessOutput>(post_obj))
    throw py::type_error(
        "record.plan and record.post must come from an engine._core.Scheduler, got " +
        py::repr(py::type::handle_of(plan_obj)).cast<std::string>() + " and " +
        py::repr(py::type::handle_of(post_obj)).cast<std::string>());
  py::detail::make_caster<StepTimes> times_caster;  // one type lookup, no isinstance first
  if (!times_caster.load(times_obj, false))
    throw py::type_error("record.times must be an engine._core.StepTimes, got " +
                         py::repr(py::type::handle_of(times_obj)).cast<std::string>());
  collect_costs(get(3), log.costs);
  const int64_t flush_ns = flush_if_full(log);
  const RecordedTimes times{t_start, t_end, static_cast<const StepTimes&>(times_caster), flush_ns};
  log.record(plan_obj.cast<const ScheduleOutput&>(), post_obj.cast<const PostprocessOutput&>(),
             times, log.costs);
  ++log.buffered;
}

// engine._core.StepTimes: what LLMEngine measured around a step, read-only. Built by a static
// function, StepTimes.of: pybind11 runs one in half the time of a constructor, and the
// engine's thread builds one every step.
void bind_step_times(py::module_& m) {
  py::class_<StepTimes>(m, "StepTimes")
      .def_static(
          "of",
          [](int64_t start_ns, int64_t sched_call_ns, int64_t forward_ns, int64_t sample_ns,
             int64_t postprocess_ns, int64_t step_ns) {
            return StepTimes{start_ns,  sched_call_ns,  forward_ns,
                             sample_ns, postprocess_ns, step_ns};
          },
          py::arg("start_ns"), py::arg("sched_call_ns"), py::arg("forward_ns"),
          py::arg("sample_ns"), py::arg("postprocess_ns"), py::arg("step_ns"))
      .def_readonly("start_ns", &StepTimes::start_ns)
      .def_readonly("sched_call_ns", &StepTimes::sched_call_ns)
      .def_readonly("forward_ns", &StepTimes::forward_ns)
      .def_readonly("sample_ns", &StepTimes::sample_ns)
      .def_readonly("postprocess_ns", &StepTimes::postprocess_ns)
      .def_readonly("step_ns", &StepTimes::step_ns)
      .def("__repr__", [](const StepTimes& t) {
        return "<StepTimes start_ns=" + std::to_string(t.start_ns) +
               " sched_call_ns=" + std::to_string(t.sched_call_ns) +
               " forward_ns=" + std::to_string(t.forward_ns) +
               " sample_ns=" + std::to_string(t.sample_ns) +
               " postprocess_ns=" + std::to_string(t.postprocess_ns) +
               " step_ns=" + std::to_string(t.step_ns) + ">";
      });
}

// What the log hands out: the counts, a chunk's columns, the inter-token histogram.
void bind_taking(py::class_<PyStepLog>& cls) {
  cls.def_property_readonly("num_done", &StepLog::num_done,
                            "Requests finished, handed off or rejected so far.")
      .def_property_readonly("num_live", &StepLog::num_live,
                             "Requests enqueued that have not left yet.")
      .def(
          "take_steps",
          [](PyStepLog& log) {
            log.buffered = 0;
            return take(log.steps());
          },
          "The step rows recorded since the last take (0/1 flags as uint8).")
      .def(
          "take_batches", [](PyStepLog& log) { return take(log.batches()); },
          "The batch rows recorded since the last take.")
      .def(
          "take_requests", [](PyStepLog& log) { return take_requests(log.requests()); },
          "The rows of the requests that left since the last take (status: 0 finished, "
          "1 rejected, 2 unfinished; reason as a list of str).")
      .def(
          "itl",
          [](const PyStepLog& log) {
            std::vector<double> values;
            std::vector<int64_t> counts;
            for (const auto& [gap, count] : log.itl()) {
              values.push_back(gap);
              counts.push_back(count);
            }
            return py::make_tuple(owned(std::move(values)), owned(std::move(counts)));
          },
          "(gap values ascending, counts) of measured, completed requests.");
}

}  // namespace

void bind_step_log(py::module_& m) {
  bind_step_times(m);
  py::class_<PyStepLog> cls(m, "StepLog");
  cls.def(py::init<int64_t, size_t, py::object>(), py::arg("warmup_steps"), py::arg("chunk_steps"),
          py::arg("on_full"))
      .def_static(
          "columns",
          [] {
            py::dict d;
            d["steps"] = names<StepRows>();
            d["batches"] = names<BatchRows>();
            py::list requests = names<RequestRows>();
            requests.append("reason");
            d["requests"] = requests;
            return d;
          },
          "The columns take_steps(), take_batches() and take_requests() return, by table.")
      .def("enqueue", &StepLog::enqueue, py::arg("added"), py::arg("t"),
           "A request entered the engine at t: the SeqRecord add_sequence returned (of the "
           "scheduler whose plans this log records, else ValueError).")
      .def("record", &record_step, py::arg("record"), py::arg("t_start"), py::arg("t_end"),
           "Record an llm_engine.StepRecord that ran from t_start to t_end (the run's "
           "clock); first on_full() if chunk_steps steps are buffered, its time in the "
           "step's flush_ns. Holds the GIL but for on_full(); a record() begun meanwhile (from "
           "on_full or another thread) raises RuntimeError.")
      .def("end", &StepLog::end,
           "The requests still live leave as rows: rejected as added, else unfinished.");
  bind_taking(cls);
}
