// The P/D routers as Python sees them (replay/routers.hpp): engine._core.PrefillRouter,
// DecodeRouter and awaited_blocks, the C++ loop's own, for the Python P/D loop and the rank
// processes' (harness/replay/disaggregated.py, harness/ranks/pd_replay.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "replay/routers.hpp"

namespace py = pybind11;
using namespace steptrace;

void bind_routers(py::module_& m) {
  py::class_<PrefillRouter>(m, "PrefillRouter")
      .def(py::init<const std::string&, int64_t, int64_t, int64_t>(), py::arg("policy"),
           py::arg("instances"), py::arg("capacity_blocks"), py::arg("block_size"))
      .def("route", &PrefillRouter::route, py::arg("prompt_len"), py::arg("hashes"),
           py::arg("session") = -1,
           "The instance a request goes to; its load counted there. session: the session "
           "whose turn it is (-1: none; session_affinity).")
      .def(
          "hashes",
          [](const PrefillRouter& r, std::optional<std::vector<int64_t>> hash_ids,
             std::optional<int64_t> hash_block_size, int64_t prompt_len) {
            if (!hash_ids) return std::vector<int64_t>();
            return r.hashes(*hash_ids, hash_block_size.value_or(0), prompt_len);
          },
          py::arg("hash_ids"), py::arg("hash_block_size"), py::arg("prompt_len"),
          "A request's chained block hashes, as cache_aware and session_affinity route by them "
          "(no other policy reads them: none).")
      .def("prefilled", &PrefillRouter::prefilled, py::arg("instance"), py::arg("prompt_len"),
           "A request routed to `instance` left it (handed off or rejected).");

  py::class_<DecodeRouter>(m, "DecodeRouter")
      .def(py::init<const std::string&, int64_t>(), py::arg("policy"), py::arg("instances"))
      .def("route", &DecodeRouter::route, py::arg("free_blocks"),
           "The instance a prefilled sequence goes to; `free_blocks` per instance, less those "
           "awaited there (least_kv; round_robin reads none).");

  m.def("awaited_blocks", &awaited_blocks, py::arg("prompt_lens"), py::arg("block_size"),
        "The KV blocks the prompts of sequences routed to a decode instance and not yet "
        "admitted will take there.");
}
