// engine._core.DeploymentRates (engine/executors/modeled.py fills them from a Deployment and
// a device profile; ModeledStep builds its DeploymentModel from them) and StepCosts.
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
}
