// The Python face of the scheduler core, engine._core: one file a concept, all of them in
// this folder, the only one of csrc/ that includes pybind11. The plan and the sequences it
// names (plan_bindings.cpp), the scheduler (scheduler_bindings.cpp), the cost model
// (cost_bindings.cpp), the config (config_bindings.cpp), the deployment model
// (deployment_bindings.cpp), the recorder's step log (step_log_bindings.cpp), the modeled
// step and the C++ replay loops (replay_bindings.cpp), the P/D routers (router_bindings.cpp)
// and the GIL probe (spin_bindings.cpp).
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_plan(py::module_& m);
void bind_scheduler(py::module_& m);
void bind_costs(py::module_& m);
void bind_config(py::module_& m);
void bind_deployment(py::module_& m);
void bind_step_log(py::module_& m);
void bind_spin(py::module_& m);
void bind_replay(py::module_& m);
void bind_routers(py::module_& m);

PYBIND11_MODULE(_core, m) {
  m.doc() = "steptrace scheduler core (C++17)";
  bind_plan(m);
  bind_scheduler(m);
  bind_costs(m);
  bind_config(m);
  bind_deployment(m);
  bind_step_log(m);
  bind_spin(m);
  bind_replay(m);
  bind_routers(m);
}
