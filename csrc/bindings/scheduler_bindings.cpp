// The Scheduler as Python sees it: arguments checked by name (py_args.hpp), schedule()
// planning with the GIL released unless the caller asks to hold it, and every call into
// one Scheduler serialised by its mutex (docs/reliability.md).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <optional>
#include <string>

#include "guarded_scheduler.hpp"
#include "py_args.hpp"
#include "scheduler.hpp"

namespace py = pybind11;
using namespace steptrace;

SchedulerConfig to_config(const py::handle& c);  // config_bindings.cpp

namespace {

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

// Making a scheduler and adding requests to it.
void bind_calls(py::class_<GuardedScheduler>& cls) {
  cls.def(py::init([](const py::object& config, bool retain_finished) {
            return std::make_unique<GuardedScheduler>(to_config(config), retain_finished);
          }),
          py::arg("config"), py::arg("retain_finished") = true)
      .def(
          "add_sequence",
          [](GuardedScheduler& s, const py::handle& seq_id, const py::handle& prompt_len,
             const py::handle& max_new_tokens, const py::handle& arrival_time,
             const py::handle& hash_ids, const py::handle& hash_block_size,
             const py::handle& kv_transfer, const py::handle& session_id) {
            const int64_t id = py_args::integer("seq_id", seq_id);
            const int64_t p = py_args::integer("prompt_len", prompt_len, 1);
            const int64_t m = py_args::integer("max_new_tokens", max_new_tokens, 1);
            const double t = py_args::finite("arrival_time", arrival_time);
            std::vector<int64_t> hashes;
            if (!hash_ids.is_none()) hashes = py_args::integers("hash_ids", hash_ids);
            const int64_t hb = hash_block_size.is_none()
                                   ? 0
                                   : py_args::integer("hash_block_size", hash_block_size, 1);
            const bool transfer = py_args::boolean("kv_transfer", kv_transfer);
            const int64_t session = py_args::integer("session_id", session_id, -1);
            Entered entered(s);
            return s.core.add_sequence(id, p, m, t, hashes, hb, transfer, session);
          },
          py::arg("seq_id"), py::arg("prompt_len"), py::arg("max_new_tokens"),
          py::arg("arrival_time") = 0.0, py::arg("hash_ids") = py::none(),
          py::arg("hash_block_size") = py::none(), py::arg("kv_transfer") = false,
          py::arg("session_id") = -1,
          "Add a request; returns its SeqRecord (waiting, finished or rejected). kv_transfer "
          "(completion engine): its KV is still in transfer. session_id: its session (-1: "
          "none; dp_assign session_affinity). Holds the GIL; waits for a schedule() running "
          "in another thread.")
      .def(
          "kv_arrived",
          [](GuardedScheduler& s, const py::handle& seq_id) {
            const int64_t id = py_args::integer("seq_id", seq_id);
            Entered entered(s);
            s.core.kv_arrived(id);
          },
          py::arg("seq_id"),
          "The sequence's KV transfer ended: it decodes from the next schedule().")
      .def(
          "end_session",
          [](GuardedScheduler& s, const py::handle& session_id) {
            const int64_t session = py_args::integer("session_id", session_id, 0);
            Entered entered(s);
            s.core.end_session(session);
          },
          py::arg("session_id"),
          "No turn of the session will come any more: its held blocks (session_retention) "
          "become plain retained ones.");
}

// Planning and committing: the calls the engine's loop makes every step.
void bind_steps(py::class_<GuardedScheduler>& cls) {
  cls.def(
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
          "for a schedule() running in another thread.");
}

// What the scheduler holds now, read under its mutex.
void bind_queries(py::class_<GuardedScheduler>& cls) {
  cls.def(
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
}

}  // namespace

void bind_scheduler(py::module_& m) {
  // A KeyError: the id names no sequence the scheduler still holds (retain_finished=False).
  py::register_exception<SequenceLeft>(m, "SequenceLeft", PyExc_KeyError);
  // Every call but retain_finished takes the scheduler's mutex: schedule() with the GIL
  // released, the others with it held (docs/reliability.md).
  py::class_<GuardedScheduler> cls(m, "Scheduler");
  bind_calls(cls);
  bind_steps(cls);
  bind_queries(cls);
}
