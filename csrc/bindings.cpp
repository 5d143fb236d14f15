// The Python face of the scheduler core: engine._core. Metadata leaves as read-only numpy
// views of the plan's own buffers (no per-element Python objects); schedule() runs with
// the GIL released unless the caller asks to hold it. Arguments are checked by name
// (py_args.hpp); calls into one Scheduler are serialised (docs/reliability.md).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <string>

#include "cost_model.hpp"
#include "py_args.hpp"
#include "scheduler.hpp"

namespace py = pybind11;
using namespace steptrace;

void bind_step_log(py::module_& m);  // recorder/step_log_bindings.cpp
void bind_config(py::module_& m);    // config_bindings.cpp
void bind_deployment(py::module_& m);  // deployment_bindings.cpp
void bind_spin(py::module_& m);      // spin_bindings.cpp
SchedulerConfig to_config(const py::handle& c);  // config_bindings.cpp

namespace {

template <typename T>
py::array_t<T> view(const T* data, std::vector<py::ssize_t> shape, py::handle base) {
  std::vector<py::ssize_t> strides(shape.size(), sizeof(T));
  if (shape.size() == 2) strides[0] = shape[1] * static_cast<py::ssize_t>(sizeof(T));
  py::array_t<T> a(shape, strides, data, base);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

template <typename T>
py::array_t<T> view(const std::vector<T>& v, py::handle base) {
  return view(v.data(), {static_cast<py::ssize_t>(v.size())}, base);
}

// engine.model_config.ModelConfig -> ModelGeometry (None -> 0), field by field.
struct GeometryFromPython {
  const py::handle& c;
  void text(const char* name, std::string& m) {
    py::object v = c.attr(name);
    if (!py::isinstance<py::str>(v))
      throw py::value_error(std::string("model.") + name + " must be a str, got " +
                            py_args::shown(v));
    m = v.cast<std::string>();
  }
  void integer(const char* name, int64_t& m) {
    py::object v = c.attr(name);
    m = v.is_none() ? 0 : py_args::integer(("model." + std::string(name)).c_str(), v);
  }
  void integers(const char* name, std::vector<int64_t>& m) {
    m = py_args::integers("model." + std::string(name), c.attr(name));
  }
};

ModelGeometry to_geometry(const py::handle& c) {
  ModelGeometry g;
  GeometryFromPython from{c};
  for_each_geometry_field(g, from);
  return g;
}

// The names for_each_geometry_field reads, in order.
struct GeometryNames {
  py::list out;
  template <class T>
  void text(const char* name, T&) {
    out.append(name);
  }
  template <class T>
  void integer(const char* name, T&) {
    out.append(name);
  }
  template <class T>
  void integers(const char* name, T&) {
    out.append(name);
  }
};

// accepted: None, a flat sequence in rank-then-batch order, or one sequence per rank.
std::optional<std::vector<int64_t>> parse_accepted(const py::handle& acc,
                                                   const ScheduleOutput& plan) {
  if (acc.is_none()) return std::nullopt;
  if (py::isinstance<py::array>(acc) || !py_args::is_sequence(acc))
    return py_args::integers("accepted", acc);
  py::sequence items = py::reinterpret_borrow<py::sequence>(acc);
  bool per_rank = false;
  if (items.size() == plan.batches.size())
    for (py::handle x : items)
      per_rank |=
          py::isinstance<py::array>(x) ? x.attr("ndim").cast<int>() == 1 : py_args::is_sequence(x);
  if (!per_rank) return py_args::integers("accepted", acc);
  std::vector<int64_t> flat;
  for (size_t r = 0; r < plan.batches.size(); ++r) {
    std::vector<int64_t> part = py_args::integers("accepted[" + std::to_string(r) + "]", items[r]);
    if (part.size() != plan.batches[r].rows())
      throw py::value_error("accepted[" + std::to_string(r) + "] has " +
                            std::to_string(part.size()) + " values; rank " + std::to_string(r) +
                            " scheduled " + std::to_string(plan.batches[r].rows()));
    flat.insert(flat.end(), part.begin(), part.end());
  }
  return flat;
}

std::optional<Phase> parse_phase(const py::handle& phase) {
  if (phase.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(phase)) {
    const std::string name = phase.cast<std::string>();
    if (name == "prompt") return Phase::kPrompt;
    if (name == "decode") return Phase::kDecode;
  }
  throw py::value_error("phase must be prompt or decode, got " + py_args::shown(phase));
}

// A Scheduler and the mutex that serialises calls into it. schedule() plans with the GIL
// released, so without it a second thread could enter the scheduler while it plans (and
// corrupt the heap). Arguments are converted before the lock is taken, results after it is
// let go: nothing under the lock calls back into Python.
struct GuardedScheduler {
  GuardedScheduler(const SchedulerConfig& config, bool retain_finished)
      : core(config, retain_finished) {}
  Scheduler core;
  std::mutex mutex;
};

// The mutex, for one call made with the GIL held. If another thread holds it (inside a
// schedule() that released the GIL), wait with the GIL released: that thread needs the GIL
// to return. Uncontended, the GIL is never let go.
class Entered {
 public:
  explicit Entered(GuardedScheduler& s) : lock_(s.mutex, std::try_to_lock) {
    if (!lock_.owns_lock()) {
      py::gil_scoped_release nogil;
      lock_.lock();
    }
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "steptrace scheduler core (C++17)";

  py::class_<Sequence>(m, "Sequence")
      .def_readonly("seq_id", &Sequence::seq_id)
      .def_readonly("prompt_len", &Sequence::prompt_len)
      .def_readonly("max_new_tokens", &Sequence::max_new_tokens)
      .def_readonly("arrival_time", &Sequence::arrival_time)
      .def_readonly("dp_rank", &Sequence::dp_rank)
      .def_readonly("num_tokens", &Sequence::num_tokens)
      .def_readonly("num_cached", &Sequence::num_cached)
      .def_readonly("num_inflight", &Sequence::num_inflight)
      .def_readonly("prefill_target", &Sequence::prefill_target)
      .def_readonly("footprint", &Sequence::footprint)
      .def_readonly("blocks", &Sequence::blocks)
      .def_readonly("num_preemptions", &Sequence::num_preemptions)
      .def_readonly("recomputed_tokens", &Sequence::recomputed_tokens)
      .def_readonly("reason", &Sequence::reason)
      .def_readonly("prefix_hit_tokens", &Sequence::prefix_hit_tokens)
      .def_property_readonly("output_len", &Sequence::output_len)
      .def_property_readonly("status", [](const Sequence& s) { return status_name(s.status); })
      .def("__repr__", [](const Sequence& s) {
        return "<Sequence " + std::to_string(s.seq_id) + " " + status_name(s.status) +
               " tokens=" + std::to_string(s.num_tokens) +
               " cached=" + std::to_string(s.num_cached) +
               " inflight=" + std::to_string(s.num_inflight) + ">";
      });

  py::class_<Batch>(m, "Batch")
      .def_readonly("rank", &Batch::rank)
      .def_property_readonly(
          "seq_ids", [](py::handle self) { return view(self.cast<const Batch&>().seq_ids, self); })
      .def_property_readonly(
          "seqlen_q",
          [](py::handle self) { return view(self.cast<const Batch&>().seqlen_q, self); })
      .def_property_readonly(
          "seqlen_k",
          [](py::handle self) { return view(self.cast<const Batch&>().seqlen_k, self); })
      .def_property_readonly(
          "padded_q",
          [](py::handle self) { return view(self.cast<const Batch&>().padded_q, self); })
      .def_property_readonly(
          "kind", [](py::handle self) { return view(self.cast<const Batch&>().kind, self); })
      .def_property_readonly("block_tables",
                             [](py::handle self) {
                               const Batch& b = self.cast<const Batch&>();
                               return view(b.block_tables.get(),
                                           {static_cast<py::ssize_t>(b.rows()),
                                            static_cast<py::ssize_t>(b.table_width)},
                                           self);
                             })
      .def_property_readonly("empty", &Batch::empty)
      .def_readonly("num_free_blocks", &Batch::num_free_blocks)
      .def_readonly("num_waiting", &Batch::num_waiting)
      .def_readonly("num_running", &Batch::num_running)
      .def_readonly("num_hit_tokens", &Batch::num_hit_tokens)
      .def_readonly("num_evicted_blocks", &Batch::num_evicted_blocks)
      .def_readonly("num_retained_blocks", &Batch::num_retained_blocks)
      .def("__len__", &Batch::rows)
      .def("__repr__", [](const Batch& b) {
        return "<Batch rank=" + std::to_string(b.rank) + " rows=" + std::to_string(b.rows()) + ">";
      });

  py::class_<ScheduleOutput, std::shared_ptr<ScheduleOutput>>(m, "Plan")
      .def_readonly("step", &ScheduleOutput::step)
      .def_property_readonly(
          "phase",
          [](const ScheduleOutput& p) { return p.phase == Phase::kPrompt ? "prompt" : "decode"; })
      .def_property_readonly(
          "batches",
          [](py::handle self) {
            ScheduleOutput& p = self.cast<ScheduleOutput&>();
            py::list out;
            for (Batch& b : p.batches)
              out.append(py::cast(&b, py::return_value_policy::reference_internal, self));
            return out;
          })
      .def_property_readonly(
          "preempted",
          [](py::handle self) { return view(self.cast<const ScheduleOutput&>().preempted, self); })
      .def_property_readonly(
          "rejected",
          [](py::handle self) { return view(self.cast<const ScheduleOutput&>().rejected, self); })
      .def_readonly("sched_start_ns", &ScheduleOutput::sched_start_ns)
      .def_readonly("sched_ns", &ScheduleOutput::sched_ns)
      .def("__repr__", [](const ScheduleOutput& p) {
        return "<Plan step=" + std::to_string(p.step) +
               (p.phase == Phase::kPrompt ? " prompt>" : " decode>");
      });

  py::class_<SeqRecord>(m, "SeqRecord")
      .def_readonly("seq_id", &SeqRecord::seq_id)
      .def_readonly("dp_rank", &SeqRecord::dp_rank)
      .def_property_readonly("status", [](const SeqRecord& r) { return status_name(r.status); })
      .def_readonly("output_len", &SeqRecord::output_len)
      .def_readonly("num_preemptions", &SeqRecord::num_preemptions)
      .def_readonly("recomputed_tokens", &SeqRecord::recomputed_tokens)
      .def_readonly("prefix_hit_tokens", &SeqRecord::prefix_hit_tokens)
      .def_readonly("reason", &SeqRecord::reason)
      .def("__repr__", [](const SeqRecord& r) {
        return "<SeqRecord " + std::to_string(r.seq_id) + " " + status_name(r.status) +
               " output_len=" + std::to_string(r.output_len) + ">";
      });

  py::class_<PostprocessOutput>(m, "PostprocessResult")
      .def_readonly("step", &PostprocessOutput::step)
      .def_property_readonly("finished",
                             [](py::handle self) {
                               return view(self.cast<const PostprocessOutput&>().finished, self);
                             })
      .def_readonly("discarded_tokens", &PostprocessOutput::discarded_tokens)
      .def_property_readonly("output_len",
                             [](py::handle self) {
                               return view(self.cast<const PostprocessOutput&>().output_len, self);
                             })
      .def_readonly("left", &PostprocessOutput::left);

  // A KeyError: the id names no sequence the scheduler still holds (retain_finished=False).
  py::register_exception<SequenceLeft>(m, "SequenceLeft", PyExc_KeyError);

  // Every call but retain_finished takes the scheduler's mutex: schedule() with the GIL
  // released, the others with it held (docs/reliability.md).
  py::class_<GuardedScheduler>(m, "Scheduler")
      .def(py::init([](const py::object& config, bool retain_finished) {
             return std::make_unique<GuardedScheduler>(to_config(config), retain_finished);
           }),
           py::arg("config"), py::arg("retain_finished") = true)
      .def(
          "add_sequence",
          [](GuardedScheduler& s, const py::handle& seq_id, const py::handle& prompt_len,
             const py::handle& max_new_tokens, const py::handle& arrival_time,
             const py::handle& hash_ids, const py::handle& hash_block_size) {
            const int64_t id = py_args::integer("seq_id", seq_id);
            const int64_t p = py_args::integer("prompt_len", prompt_len, 1);
            const int64_t m = py_args::integer("max_new_tokens", max_new_tokens, 1);
            const double t = py_args::finite("arrival_time", arrival_time);
            std::vector<int64_t> hashes;
            if (!hash_ids.is_none()) hashes = py_args::integers("hash_ids", hash_ids);
            const int64_t hb = hash_block_size.is_none()
                                   ? 0
                                   : py_args::integer("hash_block_size", hash_block_size, 1);
            Entered entered(s);
            return s.core.add_sequence(id, p, m, t, hashes, hb);
          },
          py::arg("seq_id"), py::arg("prompt_len"), py::arg("max_new_tokens"),
          py::arg("arrival_time") = 0.0, py::arg("hash_ids") = py::none(),
          py::arg("hash_block_size") = py::none(),
          "Add a request; returns its SeqRecord (waiting, finished or rejected). Holds the "
          "GIL; waits for a schedule() running in another thread.")
      .def(
          "schedule",
          [](GuardedScheduler& s, bool release_gil, const py::handle& phase) {
            const std::optional<Phase> vote = parse_phase(phase);
            if (!release_gil) {
              Entered entered(s);
              return s.core.schedule(vote);
            }
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(s.mutex);
            return s.core.schedule(vote);
          },
          py::arg("release_gil") = true, py::arg("phase") = py::none(),
          "Plan the next step. The GIL is released inside C++ unless release_gil=False; "
          "phase forces the round a DP vote across processes agreed on. Calls into one "
          "Scheduler from several threads are serialised, never concurrent.")
      .def(
          "has_prompt_work",
          [](GuardedScheduler& s) {
            Entered entered(s);
            return s.core.has_prompt_work();
          },
          "This scheduler's vote: would any rank's prompt pass schedule a token?")
      .def(
          "postprocess",
          [](GuardedScheduler& s, const py::handle& plan_obj, const py::handle& accepted,
             bool release_gil) {
            if (!py::isinstance<ScheduleOutput>(plan_obj))
              throw py::value_error("plan was not made by this scheduler");
            const auto& plan = plan_obj.cast<const ScheduleOutput&>();
            std::optional<std::vector<int64_t>> flat = parse_accepted(accepted, plan);
            if (!release_gil) {
              Entered entered(s);
              return s.core.postprocess(plan, flat ? &*flat : nullptr);
            }
            py::gil_scoped_release nogil;  // the result is converted after it is retaken
            std::lock_guard<std::mutex> lock(s.mutex);
            return s.core.postprocess(plan, flat ? &*flat : nullptr);
          },
          py::arg("plan"), py::arg("accepted") = py::none(), py::arg("release_gil") = false,
          "Commit the oldest outstanding plan. Holds the GIL unless release_gil=True; waits "
          "for a schedule() running in another thread.")
      .def(
          "seq",
          [](GuardedScheduler& s, const py::handle& seq_id) {
            const int64_t id = py_args::integer("seq_id", seq_id);
            Entered entered(s);
            return Sequence(s.core.seq(id));  // a copy, taken under the lock
          },
          py::arg("seq_id"), "A copy of the sequence's state now.")
      .def(
          "num_free_blocks",
          [](GuardedScheduler& s, const py::handle& rank) {
            const int64_t r = py_args::integer("rank", rank);
            Entered entered(s);
            return s.core.num_free_blocks(r);
          },
          py::arg("rank") = 0)
      .def(
          "refcount",
          [](GuardedScheduler& s, const py::handle& block, const py::handle& rank) {
            const int64_t b = py_args::integer("block", block);
            const int64_t r = py_args::integer("rank", rank);
            Entered entered(s);
            return s.core.refcount(b, r);
          },
          py::arg("block"), py::arg("rank") = 0)
      .def("is_finished",
           [](GuardedScheduler& s) {
             Entered entered(s);
             return s.core.is_finished();
           })
      .def_property_readonly("num_outstanding_plans",
                             [](GuardedScheduler& s) {
                               Entered entered(s);
                               return s.core.num_outstanding_plans();
                             })
      .def_property_readonly("num_slots",
                             [](GuardedScheduler& s) {
                               Entered entered(s);
                               return s.core.num_sequences();
                             })
      .def_property_readonly("num_live",
                             [](GuardedScheduler& s) {
                               Entered entered(s);
                               return s.core.num_live();
                             })
      .def_property_readonly(  // fixed at construction: no lock
          "retain_finished", [](const GuardedScheduler& s) { return s.core.retain_finished(); });

  py::class_<StepCost>(m, "StepCost")
      .def(py::init([](double model_flops, double executed_flops, double bytes) {
             return StepCost{model_flops, executed_flops, bytes};
           }),
           py::arg("model_flops"), py::arg("executed_flops"), py::arg("bytes"))
      .def_readonly("model_flops", &StepCost::model_flops)
      .def_readonly("executed_flops", &StepCost::executed_flops)
      .def_readonly("bytes", &StepCost::bytes)
      .def_readonly("attention_s", &StepCost::attention_s)
      .def_readonly("dense_s", &StepCost::dense_s)
      .def_readonly("experts_s", &StepCost::experts_s)
      .def_readonly("dispatch_s", &StepCost::dispatch_s)
      .def_readonly("combine_s", &StepCost::combine_s)
      .def_readonly("allreduce_s", &StepCost::allreduce_s)
      .def("__repr__", [](const StepCost& c) {
        return "<StepCost model_flops=" + std::to_string(c.model_flops) +
               " executed_flops=" + std::to_string(c.executed_flops) +
               " bytes=" + std::to_string(c.bytes) + ">";
      });

  py::class_<CostModel>(m, "CostModel")
      .def(py::init([](const py::object& model, double weight_bytes, double expert_weight_bytes,
                       double kv_bytes, double index_kv_bytes) {
             return CostModel(to_geometry(model), ByteSizes{weight_bytes, expert_weight_bytes,
                                                            kv_bytes, index_kv_bytes});
           }),
           py::arg("model"), py::arg("weight_bytes"), py::arg("expert_weight_bytes"),
           py::arg("kv_bytes"), py::arg("index_kv_bytes"))
      .def(
          "batch",
          [](const CostModel& c, const Batch& b, const py::object& accepted, bool mtp) {
            using Int64s = py::array_t<int64_t, py::array::c_style>;
            std::optional<Int64s> acc;  // an int64 array is read in place; ensure() costs ~200 ns
            if (!accepted.is_none()) {
              acc = py::isinstance<Int64s>(accepted) ? py::reinterpret_borrow<Int64s>(accepted)
                                                     : Int64s::ensure(accepted);
              if (!*acc) throw py::type_error("accepted must be None or a sequence of integers");
            }
            if (acc && (acc->ndim() != 1 || static_cast<size_t>(acc->size()) != b.rows()))
              throw py::value_error(
                  "accepted has " + std::to_string(acc->size()) + " values" +
                  (acc->ndim() == 1 ? "" : " in " + std::to_string(acc->ndim()) + " dimensions") +
                  "; the batch has " + std::to_string(b.rows()) + " rows");
            return c.batch(b, acc ? acc->data() : nullptr, mtp);
          },
          py::arg("batch"), py::arg("accepted") = py::none(), py::arg("mtp") = false,
          "The StepCost (model_flops, executed_flops, bytes) of FlopsEstimator.calc_flops "
          "on this batch, with mtp_q = seqlen_q when mtp.")
      .def(
          "plan",
          [](const CostModel& c, const ScheduleOutput& plan, bool mtp) {
            std::vector<StepCost> out;
            out.reserve(plan.batches.size());
            for (const Batch& b : plan.batches) out.push_back(c.batch(b, nullptr, mtp));
            return out;
          },
          py::arg("plan"), py::arg("mtp") = false,
          "batch() of every rank's batch, no drafts accepted: one call per step.");

  bind_config(m);
  bind_deployment(m);
  m.def(
      "model_geometry_fields",
      [] {
        ModelGeometry g;
        GeometryNames names;
        for_each_geometry_field(g, names);
        return names.out;
      },
      "The ModelConfig fields the C++ cost model reads, in ModelGeometry's order.");
  bind_step_log(m);
  bind_spin(m);
}
