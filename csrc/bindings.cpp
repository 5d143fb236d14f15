// The Python face of the scheduler core: engine._core. Metadata leaves as read-only numpy
// views of the plan's own buffers (no per-element Python objects); schedule() runs with
// the GIL released unless the caller asks to hold it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "cost_model.hpp"
#include "scheduler.hpp"

namespace py = pybind11;
using namespace steptrace;

void bind_step_log(py::module_& m);  // step_log_bindings.cpp

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

SchedulerConfig to_config(const py::handle& c) {
  auto get_int = [&](const char* name, int32_t none_value) {
    py::object v = c.attr(name);
    return v.is_none() ? none_value : v.cast<int32_t>();
  };
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = get_int("max_num_batched_tokens", 0);
  cfg.max_num_seqs = get_int("max_num_seqs", 0);
  cfg.num_kv_blocks = get_int("num_kv_blocks", 0);
  cfg.block_size = get_int("block_size", 0);
  cfg.cp_size = get_int("cp_size", 0);
  cfg.dp_size = get_int("dp_size", 0);
  cfg.num_mtp = get_int("num_mtp", 0);
  cfg.overlap = c.attr("overlap").cast<bool>();
  cfg.engine_type = parse_engine_type(c.attr("engine_type").cast<std::string>());
  cfg.preempt_order = parse_preempt_order(c.attr("preempt_order").cast<std::string>());
  cfg.dp_assign = parse_dp_assign(c.attr("dp_assign").cast<std::string>());
  cfg.lookahead_slots = get_int("lookahead_slots", -1);
  cfg.max_prefill_chunk = get_int("max_prefill_chunk", -1);
  return cfg;
}

// engine.model_config.ModelConfig -> ModelGeometry (None -> 0).
ModelGeometry to_geometry(const py::handle& c) {
  auto get_int = [&](const char* name) {
    py::object v = c.attr(name);
    return v.is_none() ? int64_t{0} : v.cast<int64_t>();
  };
  ModelGeometry g;
  g.name = c.attr("name").cast<std::string>();
  g.architecture = c.attr("architecture").cast<std::string>();
  g.hidden_size = get_int("hidden_size");
  g.num_hidden_layers = get_int("num_hidden_layers");
  g.num_attention_heads = get_int("num_attention_heads");
  g.vocab_size = get_int("vocab_size");
  g.q_lora_rank = get_int("q_lora_rank");
  g.qk_rope_head_dim = get_int("qk_rope_head_dim");
  g.first_k_dense_replace = get_int("first_k_dense_replace");
  g.intermediate_size = get_int("intermediate_size");
  g.moe_intermediate_size = get_int("moe_intermediate_size");
  g.n_routed_experts = get_int("n_routed_experts");
  g.n_shared_experts = get_int("n_shared_experts");
  g.num_experts_per_tok = get_int("num_experts_per_tok");
  g.kv_lora_rank = get_int("kv_lora_rank");
  g.qk_nope_head_dim = get_int("qk_nope_head_dim");
  g.v_head_dim = get_int("v_head_dim");
  g.num_nextn_predict_layers = get_int("num_nextn_predict_layers");
  g.index_n_heads = get_int("index_n_heads");
  g.index_head_dim = get_int("index_head_dim");
  g.index_topk = get_int("index_topk");
  g.head_dim = get_int("head_dim");
  g.o_lora_rank = get_int("o_lora_rank");
  g.o_groups = get_int("o_groups");
  g.sliding_window = get_int("sliding_window");
  g.compress_ratios = c.attr("compress_ratios").cast<std::vector<int64_t>>();
  g.num_hash_layers = get_int("num_hash_layers");
  return g;
}

std::vector<int64_t> to_vector(const py::handle& obj) {
  auto a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!a) throw py::value_error("expected None or a sequence of integers, got " +
                          py::repr(obj).cast<std::string>());
  return std::vector<int64_t>(a.data(), a.data() + a.size());
}

// accepted: None, a flat sequence in rank-then-batch order, or one sequence per rank.
std::optional<std::vector<int64_t>> parse_accepted(const py::handle& acc, const ScheduleOutput& plan) {
  if (acc.is_none()) return std::nullopt;
  if (py::isinstance<py::array>(acc) || !py::isinstance<py::sequence>(acc) ||
      py::isinstance<py::str>(acc))
    return to_vector(acc);
  py::sequence items = py::reinterpret_borrow<py::sequence>(acc);
  bool per_rank = false;
  if (items.size() == plan.batches.size())
    for (py::handle x : items)
      per_rank |= py::isinstance<py::array>(x) ? x.attr("ndim").cast<int>() == 1
                                                : py::isinstance<py::sequence>(x);
  if (!per_rank) return to_vector(acc);
  std::vector<int64_t> flat;
  for (size_t r = 0; r < plan.batches.size(); ++r) {
    std::vector<int64_t> part = to_vector(items[r]);
    if (part.size() != plan.batches[r].rows())
      throw py::value_error("accepted[" + std::to_string(r) + "] has " +
                            std::to_string(part.size()) + " values; rank " + std::to_string(r) +
                            " scheduled " + std::to_string(plan.batches[r].rows()));
    flat.insert(flat.end(), part.begin(), part.end());
  }
  return flat;
}

Phase parse_phase(const std::string& name) {
  if (name == "prompt") return Phase::kPrompt;
  if (name == "decode") return Phase::kDecode;
  throw py::value_error("phase must be prompt or decode, got '" + name + "'");
}

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
               " tokens=" + std::to_string(s.num_tokens) + " cached=" +
               std::to_string(s.num_cached) + " inflight=" + std::to_string(s.num_inflight) + ">";
      });

  py::class_<Batch>(m, "Batch")
      .def_readonly("rank", &Batch::rank)
      .def_property_readonly("seq_ids", [](py::handle self) { return view(self.cast<const Batch&>().seq_ids, self); })
      .def_property_readonly("seqlen_q", [](py::handle self) { return view(self.cast<const Batch&>().seqlen_q, self); })
      .def_property_readonly("seqlen_k", [](py::handle self) { return view(self.cast<const Batch&>().seqlen_k, self); })
      .def_property_readonly("padded_q", [](py::handle self) { return view(self.cast<const Batch&>().padded_q, self); })
      .def_property_readonly("kind", [](py::handle self) { return view(self.cast<const Batch&>().kind, self); })
      .def_property_readonly("block_tables", [](py::handle self) {
        const Batch& b = self.cast<const Batch&>();
        return view(b.block_tables.get(),
                    {static_cast<py::ssize_t>(b.rows()), static_cast<py::ssize_t>(b.table_width)}, self);
      })
      .def_property_readonly("empty", &Batch::empty)
      .def_readonly("num_free_blocks", &Batch::num_free_blocks)
      .def_readonly("num_waiting", &Batch::num_waiting)
      .def_readonly("num_running", &Batch::num_running)
      .def("__len__", &Batch::rows)
      .def("__repr__", [](const Batch& b) {
        return "<Batch rank=" + std::to_string(b.rank) + " rows=" + std::to_string(b.rows()) + ">";
      });

  py::class_<ScheduleOutput, std::shared_ptr<ScheduleOutput>>(m, "Plan")
      .def_readonly("step", &ScheduleOutput::step)
      .def_property_readonly("phase", [](const ScheduleOutput& p) {
        return p.phase == Phase::kPrompt ? "prompt" : "decode";
      })
      .def_property_readonly("batches", [](py::handle self) {
        ScheduleOutput& p = self.cast<ScheduleOutput&>();
        py::list out;
        for (Batch& b : p.batches) out.append(py::cast(&b, py::return_value_policy::reference_internal, self));
        return out;
      })
      .def_property_readonly("preempted", [](py::handle self) { return view(self.cast<const ScheduleOutput&>().preempted, self); })
      .def_property_readonly("rejected", [](py::handle self) { return view(self.cast<const ScheduleOutput&>().rejected, self); })
      .def_readonly("sched_start_ns", &ScheduleOutput::sched_start_ns)
      .def_readonly("sched_ns", &ScheduleOutput::sched_ns)
      .def("__repr__", [](const ScheduleOutput& p) {
        return "<Plan step=" + std::to_string(p.step) +
               (p.phase == Phase::kPrompt ? " prompt>" : " decode>");
      });

  py::class_<PostprocessOutput>(m, "PostprocessResult")
      .def_property_readonly("finished", [](py::handle self) { return view(self.cast<const PostprocessOutput&>().finished, self); })
      .def_readonly("discarded_tokens", &PostprocessOutput::discarded_tokens);

  // A KeyError: the id names no sequence the scheduler still holds (retain_finished=False).
  py::register_exception<SequenceLeft>(m, "SequenceLeft", PyExc_KeyError);

  py::class_<Scheduler>(m, "Scheduler")
      .def(py::init([](const py::object& config, bool retain_finished) {
             return std::make_unique<Scheduler>(to_config(config), retain_finished);
           }),
           py::arg("config"), py::arg("retain_finished") = true)
      .def("add_sequence",
           [](Scheduler& s, int64_t seq_id, int64_t prompt_len, int64_t max_new_tokens,
              double arrival_time, const py::object& hash_ids) {
             s.add_sequence(seq_id, prompt_len, max_new_tokens, arrival_time,
                            hash_ids.is_none() ? std::vector<int64_t>{} : to_vector(hash_ids));
           },
           py::arg("seq_id"), py::arg("prompt_len"), py::arg("max_new_tokens"),
           py::arg("arrival_time") = 0.0, py::arg("hash_ids") = py::none())
      .def("schedule",
           [](Scheduler& s, bool release_gil, const py::object& phase) {
             std::optional<Phase> vote;
             if (!phase.is_none()) vote = parse_phase(phase.cast<std::string>());
             if (!release_gil) return s.schedule(vote);
             py::gil_scoped_release nogil;
             return s.schedule(vote);
           },
           py::arg("release_gil") = true, py::arg("phase") = py::none(),
           "Plan the next step. The GIL is released inside C++ unless release_gil=False; "
           "phase forces the round a DP vote across processes agreed on.")
      .def("has_prompt_work", &Scheduler::has_prompt_work)
      .def("postprocess",
           [](Scheduler& s, const ScheduleOutput& plan, const py::object& accepted) {
             std::optional<std::vector<int64_t>> flat = parse_accepted(accepted, plan);
             return s.postprocess(plan, flat ? &*flat : nullptr);
           },
           py::arg("plan"), py::arg("accepted") = py::none())
      .def("seq", &Scheduler::seq, py::arg("seq_id"))
      .def("num_free_blocks", &Scheduler::num_free_blocks, py::arg("rank") = 0)
      .def("refcount", &Scheduler::refcount, py::arg("block"), py::arg("rank") = 0)
      .def("is_finished", &Scheduler::is_finished)
      .def_property_readonly("num_outstanding_plans", &Scheduler::num_outstanding_plans)
      .def_property_readonly("num_slots", &Scheduler::num_sequences)
      .def_property_readonly("num_live", &Scheduler::num_live)
      .def_property_readonly("retain_finished", &Scheduler::retain_finished);

  py::class_<CostModel>(m, "CostModel")
      .def(py::init([](const py::object& model, double weight_bytes, double expert_weight_bytes,
                       double kv_bytes, double index_kv_bytes) {
             return CostModel(to_geometry(model),
                              ByteSizes{weight_bytes, expert_weight_bytes, kv_bytes, index_kv_bytes});
           }),
           py::arg("model"), py::arg("weight_bytes"), py::arg("expert_weight_bytes"),
           py::arg("kv_bytes"), py::arg("index_kv_bytes"))
      .def("batch",
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
             StepCost s = c.batch(b, acc ? acc->data() : nullptr, mtp);
             return py::make_tuple(s.model_flops, s.executed_flops, s.bytes);
           },
           py::arg("batch"), py::arg("accepted") = py::none(), py::arg("mtp") = false,
           "(model_flops, executed_flops, bytes) of FlopsEstimator.calc_flops on this batch, "
           "with mtp_q = seqlen_q when mtp.")
      .def("plan",
           [](const CostModel& c, const ScheduleOutput& plan, bool mtp) {
             py::list out(plan.batches.size());
             for (size_t r = 0; r < plan.batches.size(); ++r) {
               StepCost s = c.batch(plan.batches[r], nullptr, mtp);
               out[r] = py::make_tuple(s.model_flops, s.executed_flops, s.bytes);
             }
             return out;
           },
           py::arg("plan"), py::arg("mtp") = false,
           "batch() of every rank's batch, no drafts accepted: one call per step.");

  bind_step_log(m);
}
