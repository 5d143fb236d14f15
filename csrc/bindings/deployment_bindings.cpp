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

namespace {

// engine._core.KernelCurve, Quantity, Part, When, KernelTerm and KernelStep: the kernel
// tables' terms of a deployment's step (engine/kernels/step.py builds them)
void bind_kernel_step(py::module_& m) {
  py::class_<KernelCurve>(m, "KernelCurve")
      .def(py::init<std::vector<double>, std::vector<double>, const std::vector<double>&>(),
           py::arg("tokens"), py::arg("contexts"), py::arg("times_us"))
      .def(
          "seconds",
          [](const KernelCurve& c, double tokens, double context) {
            bool outside = false;
            const double s = c.seconds(tokens, context, outside);
            return py::make_tuple(s, outside);
          },
          py::arg("tokens"), py::arg("context") = 0.0,
          "(seconds, outside): one call at (tokens, context), and whether that lies outside "
          "the curve's grid.");
  py::enum_<Quantity>(m, "Quantity")
      .value("tokens", Quantity::kTokens)
      .value("decode_rows", Quantity::kDecodeRows)
      .value("decode_tokens", Quantity::kDecodeTokens)
      .value("prefill_row", Quantity::kPrefillRow)
      .value("prefill_tokens", Quantity::kPrefillTokens)
      .value("logits", Quantity::kLogits)
      .value("group_tokens", Quantity::kGroupTokens)
      .value("sent_tokens", Quantity::kSentTokens);
  py::enum_<Part>(m, "Part")
      .value("attention", Part::kAttention)
      .value("dense", Part::kDense)
      .value("experts", Part::kExperts)
      .value("dispatch", Part::kDispatch)
      .value("combine", Part::kCombine)
      .value("allreduce", Part::kAllReduce);
  py::enum_<When>(m, "When")
      .value("always", When::kAlways)
      .value("decode_only", When::kDecodeOnly)
      .value("with_prefill", When::kWithPrefill);
  py::class_<KernelTerm>(m, "KernelTerm")
      .def(py::init([](KernelCurve curve, Quantity quantity, Part part, When when, double calls,
                       bool per_layer, double scale, bool substitute, bool aux) {
             return KernelTerm{std::move(curve), quantity, part,       when, calls,
                               per_layer,        scale,    substitute, aux};
           }),
           py::arg("curve"), py::arg("quantity"), py::arg("part"), py::arg("when"),
           py::arg("calls"), py::arg("per_layer"), py::arg("scale") = 1.0,
           py::arg("substitute") = false, py::arg("aux") = false);
  py::class_<KernelStep, std::shared_ptr<KernelStep>>(m, "KernelStep")
      .def(py::init<std::vector<KernelTerm>, int64_t, double, double>(), py::arg("terms"),
           py::arg("micro_batches"), py::arg("mtp_layers_per_layer"),
           py::arg("decode_layer_scale") = 1.0);
}

}  // namespace

void bind_deployment(py::module_& m) {
  bind_kernel_step(m);
  py::class_<DeploymentRates>(m, "DeploymentRates")
      .def(py::init<>())
#define RATE(name) .def_readwrite(#name, &DeploymentRates::name)
          RATE(devices) RATE(attention_tp) RATE(dense_tp) RATE(moe_ep) RATE(moe_tp)
              RATE(micro_batches) RATE(scaleup_devices) RATE(local_experts) RATE(expert_imbalance)
                  RATE(hidden) RATE(dispatch_bytes) RATE(combine_bytes) RATE(layers)
                      RATE(attention_flops_per_s) RATE(dense_flops_per_s) RATE(expert_flops_per_s)
                          RATE(hbm_bytes_per_s) RATE(scaleup_bytes_per_s) RATE(scaleout_bytes_per_s)
                              RATE(scaleup_latency_s) RATE(scaleout_latency_s) RATE(overhead_s)
                                  RATE(layer_floor_s) RATE(kernels);
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
