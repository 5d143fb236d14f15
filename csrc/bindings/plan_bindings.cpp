// The plan a schedule() returns and the sequences it names, as Python sees them: metadata
// leaves as read-only numpy views of the plan's own buffers (no per-element Python
// objects), kept alive by the object they came from.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "scheduler.hpp"

namespace py = pybind11;
using namespace steptrace;

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

void bind_sequences(py::module_& m) {
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
      .def_readonly("kv_pending", &Sequence::kv_pending)
      .def_property_readonly("output_len", &Sequence::output_len)
      .def_property_readonly("status", [](const Sequence& s) { return status_name(s.status); })
      .def("__repr__", [](const Sequence& s) {
        return "<Sequence " + std::to_string(s.seq_id) + " " + status_name(s.status) +
               " tokens=" + std::to_string(s.num_tokens) +
               " cached=" + std::to_string(s.num_cached) +
               " inflight=" + std::to_string(s.num_inflight) + ">";
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
}

void bind_batch(py::module_& m) {
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
      .def_readonly("kv_blocks_free", &Batch::kv_blocks_free)
      .def_readonly("num_waiting", &Batch::num_waiting)
      .def_readonly("num_running", &Batch::num_running)
      .def_readonly("num_hit_tokens", &Batch::num_hit_tokens)
      .def_readonly("num_reloaded_blocks", &Batch::num_reloaded_blocks)
      .def_readonly("num_evicted_blocks", &Batch::num_evicted_blocks)
      .def_readonly("num_retained_blocks", &Batch::num_retained_blocks)
      .def("__len__", &Batch::rows)
      .def("__repr__", [](const Batch& b) {
        return "<Batch rank=" + std::to_string(b.rank) + " rows=" + std::to_string(b.rows()) + ">";
      });
}

}  // namespace

void bind_plan(py::module_& m) {
  bind_sequences(m);
  bind_batch(m);

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
}
