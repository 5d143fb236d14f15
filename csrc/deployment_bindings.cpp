// engine._core.DeploymentRates and DeploymentModel (engine/executors/modeled.py builds
// them from a Deployment and a device profile).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "deployment_model.hpp"

namespace py = pybind11;
using namespace steptrace;

void bind_deployment(py::module_& m) {
  py::class_<DeploymentRates>(m, "DeploymentRates")
      .def(py::init<>())
#define RATE(name) .def_readwrite(#name, &DeploymentRates::name)
          RATE(devices) RATE(attention_tp) RATE(dense_tp) RATE(moe_ep) RATE(moe_tp)
              RATE(micro_batches) RATE(scaleup_devices) RATE(local_experts) RATE(expert_imbalance)
                  RATE(hidden) RATE(dispatch_bytes) RATE(combine_bytes) RATE(layers)
                      RATE(attention_flops_per_s) RATE(dense_flops_per_s) RATE(expert_flops_per_s)
                          RATE(hbm_bytes_per_s) RATE(scaleup_bytes_per_s) RATE(scaleout_bytes_per_s)
                              RATE(scaleup_latency_s) RATE(scaleout_latency_s) RATE(overhead_s)
                                  RATE(layer_floor_s);
#undef RATE

  py::class_<StepCosts>(m, "StepCosts")
      .def("__len__", [](const StepCosts& c) { return c.ranks.size(); })
      .def("__getitem__",
           [](const StepCosts& c, size_t i) {
             if (i >= c.ranks.size()) throw py::index_error("rank " + std::to_string(i));
             return c.ranks[i];
           })
      .def(
          "__iter__",
          [](const StepCosts& c) { return py::make_iterator(c.ranks.begin(), c.ranks.end()); },
          py::keep_alive<0, 1>());

  py::class_<DeploymentModel>(m, "DeploymentModel")
      .def(py::init<const CostModel&, const DeploymentRates&>(), py::arg("cost"), py::arg("rates"))
      .def(
          "step",
          [](const DeploymentModel& d, const ScheduleOutput& plan, const py::object& accepted,
             bool mtp) {
            using Int64s = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
            std::vector<Int64s> held;  // keeps the arrays alive while the step reads them
            std::vector<const int64_t*> rows;
            if (!accepted.is_none()) {
              for (const py::handle& a : accepted) {
                held.push_back(Int64s::ensure(a));
                if (!held.back()) throw py::type_error("accepted: an integer array per rank");
                const size_t rank = rows.size();
                if (rank >= plan.batches.size() ||
                    static_cast<size_t>(held.back().size()) != plan.batches[rank].rows())
                  throw py::value_error("accepted: rank " + std::to_string(rank) +
                                        " does not match the plan's batch");
                rows.push_back(held.back().data());
              }
            }
            DeploymentStep s = d.step(plan, rows, mtp);
            return py::make_tuple(s.seconds, std::move(s.costs));
          },
          py::arg("plan"), py::arg("accepted") = py::none(), py::arg("mtp") = false,
          "(seconds, StepCosts: a StepCost per rank with its parts' seconds) of one step; "
          "accepted: "
          "None or an array of accepted drafts per rank.");
}
