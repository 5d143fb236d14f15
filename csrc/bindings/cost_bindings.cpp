// The cost model as Python sees it: a step's FLOPs and bytes (StepCost), CostModel built
// from a ModelConfig read field by field, and the names of the fields it reads.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "cost_model.hpp"
#include "py_args.hpp"

namespace py = pybind11;
using namespace steptrace;

namespace {

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

void bind_cost_model(py::module_& m) {
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
}

}  // namespace

void bind_costs(py::module_& m) {
  py::class_<StepCost>(m, "StepCost")
      .def(py::init([](double model_flops, double executed_flops, double bytes, double rank_s) {
             StepCost c{model_flops, executed_flops, bytes};
             c.rank_s = rank_s;
             return c;
           }),
           py::arg("model_flops"), py::arg("executed_flops"), py::arg("bytes"),
           py::arg("rank_s") = 0.0)
      .def_readonly("model_flops", &StepCost::model_flops)
      .def_readonly("executed_flops", &StepCost::executed_flops)
      .def_readonly("bytes", &StepCost::bytes)
      .def_readonly("attention_s", &StepCost::attention_s)
      .def_readonly("dense_s", &StepCost::dense_s)
      .def_readonly("experts_s", &StepCost::experts_s)
      .def_readonly("dispatch_s", &StepCost::dispatch_s)
      .def_readonly("combine_s", &StepCost::combine_s)
      .def_readonly("allreduce_s", &StepCost::allreduce_s)
      .def_readonly("aux_s", &StepCost::aux_s)
      .def_readonly("extrapolated", &StepCost::extrapolated)
      .def_readonly("rank_s", &StepCost::rank_s)
      .def(
          "with_parts",
          [](StepCost c, double attention_s, double dense_s, double experts_s, double dispatch_s,
             double combine_s) {
            c.attention_s = attention_s;
            c.dense_s = dense_s;
            c.experts_s = experts_s;
            c.dispatch_s = dispatch_s;
            c.combine_s = combine_s;
            return c;
          },
          "A copy with the parts' seconds measured on a real device (engine/step_parts.py)",
          py::arg("attention_s"), py::arg("dense_s"), py::arg("experts_s"), py::arg("dispatch_s"),
          py::arg("combine_s"))
      .def("__repr__", [](const StepCost& c) {
        return "<StepCost model_flops=" + std::to_string(c.model_flops) +
               " executed_flops=" + std::to_string(c.executed_flops) +
               " bytes=" + std::to_string(c.bytes) + ">";
      });

  bind_cost_model(m);
  m.def(
      "model_geometry_fields",
      [] {
        ModelGeometry g;
        GeometryNames names;
        for_each_geometry_field(g, names);
        return names.out;
      },
      "The ModelConfig fields the C++ cost model reads, in ModelGeometry's order.");
}
