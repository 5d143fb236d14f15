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

// A text column leaves as a list of str.
py::list drain(std::vector<std::string>& v) {
  py::list out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = py::str(v[i]);
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

Handoffs handoff_of(const std::string& name) {
  if (name == "none") return Handoffs::kNone;
  if (name == "row") return Handoffs::kRow;
  if (name == "kept") return Handoffs::kKept;
  throw py::value_error("handoff must be one of none, row, kept; got '" + name + "'");
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
          "take_requests", [](PyStepLog& log) { return take(log.requests()); },
          "The rows of the requests that left since the last take (status: 0 finished, "
          "1 rejected, 2 unfinished, 3 handed off; reason as a list of str).")
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

// A handed-off request's P/D columns set by name: Python holds no reference into the log.
void set_handed(PyStepLog& log, int64_t seq_id, const py::kwargs& columns) {
  static const std::pair<const char*, int32_t PdColumns::*> kInstances[] = {
      {"prefill_instance", &PdColumns::prefill_instance},
      {"decode_instance", &PdColumns::decode_instance}};
  static const std::pair<const char*, double PdColumns::*> kValues[] = {
      {"kv_bytes", &PdColumns::kv_bytes},
      {"handoff_s", &PdColumns::handoff_s},
      {"transfer_start_s", &PdColumns::transfer_start_s},
      {"transfer_end_s", &PdColumns::transfer_end_s},
      {"decode_wait_s", &PdColumns::decode_wait_s}};
  PdColumns& pd = log.handed(seq_id);
  for (const auto& [key, value] : columns) {
    const auto name = key.cast<std::string>();
    bool found = false;
    for (const auto& [field, member] : kInstances)
      if (name == field) pd.*member = value.cast<int32_t>(), found = true;
    for (const auto& [field, member] : kValues)
      if (name == field) pd.*member = value.cast<double>(), found = true;
    if (!found) throw py::type_error("set_handed: no P/D column " + name);
  }
}

void bind_pd_columns(py::module_& m) {
  py::class_<PdColumns>(m, "PdColumns",
                        "A request's P/D columns, read (StepLog.set_handed writes them).")
#define FIELD(name) .def_readonly(#name, &PdColumns::name)
      FIELD(prefill_instance) FIELD(decode_instance) FIELD(kv_bytes) FIELD(handoff_s)
          FIELD(transfer_start_s) FIELD(transfer_end_s) FIELD(decode_wait_s);
#undef FIELD
}

}  // namespace

void bind_step_log(py::module_& m) {
  bind_step_times(m);
  bind_pd_columns(m);
  py::class_<PyStepLog> cls(m, "StepLog");
  cls.def(py::init([](int64_t warmup_steps, size_t chunk_steps, py::object on_full,
                      const std::string& handoff, int32_t instance) {
            return std::make_unique<PyStepLog>(warmup_steps, chunk_steps, std::move(on_full),
                                               handoff_of(handoff), instance);
          }),
          py::arg("warmup_steps"), py::arg("chunk_steps"), py::arg("on_full"),
          py::arg("handoff") = "none", py::arg("instance") = 0,
          "handoff: how its engine hands requests on after their prefill: `none`; `row` (a "
          "prompt engine's: each leaves as a row ending handed off); `kept` (a P/D prefill "
          "instance's in one process with the decode instances: each waits in the log, "
          "handed(), until a decode instance's log takes it in, enqueue(..., handed_by)). "
          "instance: its index in its pool.")
      .def_static(
          "columns",
          [] {
            py::dict d;
            d["steps"] = names<StepRows>();
            d["batches"] = names<BatchRows>();
            d["requests"] = names<RequestRows>();
            return d;
          },
          "The columns take_steps(), take_batches() and take_requests() return, by table.")
      .def(
          "enqueue",
          [](PyStepLog& log, const SeqRecord& added, double t, PyStepLog* handed_by) {
            handed_by ? log.enqueue(added, t, *handed_by) : log.enqueue(added, t);
          },
          py::arg("added"), py::arg("t"), py::arg("handed_by") = nullptr,
          "A request entered the engine at t: the SeqRecord add_sequence returned (of the "
          "scheduler whose plans this log records, else ValueError); `handed_by`: the log "
          "of the P/D prefill instance that handed it off (its row is then the request's "
          "one row).")
      .def(
          "handed", [](PyStepLog& log, int64_t seq_id) { return log.handed(seq_id); },
          py::arg("seq_id"),
          "A copy of the PdColumns of a request this `kept` log handed off and no decode "
          "instance's log took in yet (IndexError if none).")
      .def("set_handed", &set_handed, py::arg("seq_id"),
           "Set the named PdColumns (keyword arguments) of a request this `kept` log handed "
           "off and no decode instance's log took in yet (IndexError if none; TypeError for "
           "a name that is not a column): the replay fills them in before a log takes the "
           "request in or end() writes it.")
      .def("record", &record_step, py::arg("record"), py::arg("t_start"), py::arg("t_end"),
           "Record an llm_engine.StepRecord that ran from t_start to t_end (the run's "
           "clock); first on_full() if chunk_steps steps are buffered, its time in the "
           "step's flush_ns. Holds the GIL but for on_full(); a record() begun meanwhile (from "
           "on_full or another thread) raises RuntimeError.")
      .def("end", &StepLog::end,
           "The requests still live leave as rows: rejected as added, else unfinished; then "
           "those a `kept` log handed off and no decode instance took in, unfinished.");
  bind_taking(cls);
}
