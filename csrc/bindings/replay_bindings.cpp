// engine._core.ModeledStep (the modeled executor's step), replay_virtual and
// replay_disaggregated (the C++ replay loops of a modeled run on the virtual clock, one
// instance or a P/D deployment's; harness/replay/native.py starts them), and SessionTurns
// (a session trace's turns as the Python P/D loop releases them).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "guarded_scheduler.hpp"
#include "py_step_log.hpp"
#include "replay/modeled_step.hpp"
#include "replay/pd_replay.hpp"
#include "replay/session_turns.hpp"
#include "replay/virtual_replay.hpp"

namespace py = pybind11;
using namespace steptrace;

namespace {

using Int64s = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using Doubles = py::array_t<double, py::array::c_style | py::array::forcecast>;

// A 128-bit Python int as (high, low) 64-bit halves.
std::pair<uint64_t, uint64_t> halves(const py::handle& value) {
  const py::object mask = py::int_(0xFFFFFFFFFFFFFFFFULL);
  return {value.attr("__rshift__")(64).attr("__and__")(mask).cast<uint64_t>(),
          value.attr("__and__")(mask).cast<uint64_t>()};
}

// numpy's bit_generator.state of a PCG64 Generator.
Pcg64 pcg64_of(const py::dict& state) {
  if (!state.contains("bit_generator") || state["bit_generator"].cast<std::string>() != "PCG64")
    throw py::value_error("rng_state must be a numpy PCG64 bit_generator.state");
  const py::dict s = state["state"];
  const auto [state_hi, state_lo] = halves(s["state"]);
  const auto [inc_hi, inc_lo] = halves(s["inc"]);
  return Pcg64(state_hi, state_lo, inc_hi, inc_lo);
}

py::object accepted_arrays(const ModeledOutput& out, bool mtp) {
  if (!mtp) return py::none();
  py::list ranks;
  for (const auto& a : out.accepted)
    ranks.append(Int64s(static_cast<py::ssize_t>(a.size()), a.data()));
  return ranks;
}

// The loop's calls into Python: each with the GIL taken and the scheduler's mutex (every
// instance's, in a P/D deployment) let go.
class PyHooks : public ReplayHooks {
 public:
  PyHooks(std::vector<PyStepLog*> logs, py::object on_progress,
          std::vector<std::unique_lock<std::mutex>>& schedulers)
      : logs_(std::move(logs)), on_progress_(std::move(on_progress)), schedulers_(schedulers) {}

  int64_t before_record(size_t k) override {
    PyStepLog& log = *logs_.at(k);
    int64_t ns = 0;
    if (log.buffered >= log.chunk_steps) {
      const int64_t start = steady_now_ns();
      in_python([&] { log.on_full(); });
      log.buffered = 0;
      ns = steady_now_ns() - start;
    }
    ++log.buffered;
    return ns;
  }

  bool progress(int64_t done, int64_t n) override {
    bool go_on = false;
    in_python([&] { go_on = on_progress_(done, n).cast<bool>(); });
    return go_on;
  }

 private:
  template <typename F>
  void in_python(F call) {
    for (auto& lock : schedulers_) lock.unlock();
    {
      py::gil_scoped_acquire gil;
      call();
    }
    for (auto& lock : schedulers_) lock.lock();
  }

  std::vector<PyStepLog*> logs_;
  py::object on_progress_;
  std::vector<std::unique_lock<std::mutex>>& schedulers_;
};

// The loop run with the GIL released, each scheduler's mutex held, and each log marked as
// recording.
template <typename Loop>
bool run_released(const std::vector<GuardedScheduler*>& schedulers,
                  const std::vector<PyStepLog*>& logs, py::object on_progress,
                  int64_t progress_every, Loop make_and_run) {
  if (progress_every < 1) throw py::value_error("progress_every must be >= 1");
  std::vector<std::unique_ptr<Recording>> recording;
  for (PyStepLog* log : logs) recording.push_back(std::make_unique<Recording>(*log));
  py::gil_scoped_release nogil;
  std::vector<std::unique_lock<std::mutex>> locks;
  for (GuardedScheduler* s : schedulers) locks.emplace_back(s->mutex);
  PyHooks hooks(logs, std::move(on_progress), locks);
  return make_and_run(hooks);
}

using Flags = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

struct HeldSessions {  // a session trace's tree (harness/replay/sessions.py, SessionTree)
  Int64s parent;
  Doubles gap_s;
  Flags subagent;
  Int64s session_id;
  int64_t live;
};

struct HeldRequests {  // the arrays ReplayRequests points into, alive for the replay
  Doubles arrival_s;
  Int64s prompt_len, max_new_tokens;
  std::optional<Int64s> hash_offsets, hash_ids;
  std::optional<py::array_t<double>> released_s;
  std::optional<HeldSessions> sessions;
};

// sessions: (parent, gap_s, subagent, session_id, live) or None.
std::optional<HeldSessions> sessions_of(const py::object& sessions) {
  if (sessions.is_none()) return std::nullopt;
  const auto t = sessions.cast<py::tuple>();
  if (t.size() != 5)
    throw py::value_error("sessions: (parent, gap_s, subagent, session_id, live) or None");
  return HeldSessions{t[0].cast<Int64s>(), t[1].cast<Doubles>(), t[2].cast<Flags>(),
                      t[3].cast<Int64s>(), t[4].is_none() ? 0 : t[4].cast<int64_t>()};
}

void check_tree(const HeldSessions& s, int64_t n) {
  if (s.parent.size() != n || s.gap_s.size() != n || s.subagent.size() != n ||
      s.session_id.size() != n)
    throw py::value_error("a session tree has one parent, gap, flag and session a request");
  for (int64_t i = 0; i < n; ++i)
    if (s.parent.data()[i] >= i || s.parent.data()[i] < -1)
      throw py::value_error("a turn's parent is an earlier row, or -1: row " + std::to_string(i));
  if (s.live < 0) throw py::value_error("live sessions must be >= 0");
}

ReplayRequests requests_of(HeldRequests& h, int64_t hash_block_size, int64_t concurrency) {
  ReplayRequests r;
  r.n = h.arrival_s.size();
  if (h.prompt_len.size() != r.n || h.max_new_tokens.size() != r.n)
    throw py::value_error("arrival_s, prompt_len and max_new_tokens must have one value a request");
  r.arrival_s = h.arrival_s.data();
  r.prompt_len = h.prompt_len.data();
  r.max_new_tokens = h.max_new_tokens.data();
  if (h.hash_offsets.has_value() != h.hash_ids.has_value())
    throw py::value_error("give both hash_offsets and hash_ids, or neither");
  if (h.hash_offsets) {
    if (h.hash_offsets->size() != r.n + 1)
      throw py::value_error("hash_offsets must have one value a request, and one more");
    r.hash_offsets = h.hash_offsets->data();
    r.hash_ids = h.hash_ids->data();
  }
  r.hash_block_size = hash_block_size;
  r.concurrency = concurrency;
  if (h.sessions) {
    const HeldSessions& s = *h.sessions;
    if (concurrency > 0)
      throw py::value_error("sessions are their own closed loop: expected concurrency 0");
    check_tree(s, r.n);
    r.sessions = SessionTree{s.parent.data(), s.gap_s.data(), s.subagent.data(),
                             s.session_id.data(), s.live};
  }
  if (concurrency > 0 || h.sessions) {
    if (!h.released_s || h.released_s->size() != r.n || !h.released_s->writeable())
      throw py::value_error(
          "a closed loop or a session trace writes each request's arrival into released_s: "
          "a writable float64 array, one value a request");
    r.released_s = h.released_s->mutable_data();
  }
  return r;
}

HeldSessions given(std::optional<HeldSessions> sessions) {
  if (!sessions) throw py::value_error("sessions: (parent, gap_s, subagent, session_id, live)");
  return std::move(*sessions);
}

// A session trace's turns as the Python P/D loop releases them, over arrays it holds.
class HeldTurns {
 public:
  HeldTurns(const py::object& sessions, const Doubles& arrival_s)
      : held_(given(sessions_of(sessions))),
        tree_{held_.parent.data(), held_.gap_s.data(), held_.subagent.data(),
              held_.session_id.data(), held_.live},
        turns_(tree_, checked_n(held_, arrival_s), arrival_s.data()) {}
  SessionTurns& turns() { return turns_; }
  int64_t n() const { return held_.parent.size(); }

 private:
  static int64_t checked_n(const HeldSessions& s, const Doubles& arrival_s) {
    check_tree(s, arrival_s.size());
    return arrival_s.size();
  }

  HeldSessions held_;
  SessionTree tree_;
  SessionTurns turns_;
};

bool replay_virtual(GuardedScheduler& s, ModeledStep& step, PyStepLog& log, HeldRequests& h,
                    int64_t hash_block_size, int64_t concurrency, bool overlap,
                    int64_t progress_every, py::object on_progress) {
  const ReplayRequests requests = requests_of(h, hash_block_size, concurrency);
  return run_released({&s}, {&log}, std::move(on_progress), progress_every, [&](PyHooks& hooks) {
    VirtualReplay replay(s.core, step, log, requests, overlap, hooks);
    return replay.run(progress_every);
  });
}

// instances: (role, index, scheduler, step, log) of each, prefill instances first.
bool replay_disaggregated(const py::list& instances, HeldRequests& h, int64_t hash_block_size,
                          int64_t concurrency, const PdService& service, int64_t progress_every,
                          py::object on_progress) {
  const ReplayRequests requests = requests_of(h, hash_block_size, concurrency);
  std::vector<PdInstance> pool;
  std::vector<GuardedScheduler*> schedulers;
  std::vector<PyStepLog*> logs;
  for (const py::handle& item : instances) {
    const auto t = item.cast<py::tuple>();
    const auto role = t[0].cast<std::string>();
    if (role != "prefill" && role != "decode")
      throw py::value_error("an instance's role is prefill or decode, got " + role);
    schedulers.push_back(&t[2].cast<GuardedScheduler&>());
    logs.push_back(&t[4].cast<PyStepLog&>());
    if ((logs.back()->handoffs() == Handoffs::kKept) != (role == "prefill"))
      throw py::value_error(
          "a prefill instance's log, and only one, keeps its hand-offs "
          "(StepLog handoff='kept')");
    PdInstance& instance = pool.emplace_back();
    instance.prefill = role == "prefill";
    instance.index = t[1].cast<int64_t>();
    instance.scheduler = &schedulers.back()->core;
    instance.step = &t[3].cast<ModeledStep&>();
    instance.log = logs.back();
  }
  return run_released(schedulers, logs, std::move(on_progress), progress_every,
                      [&](PyHooks& hooks) {
                        PdReplay replay(pool, requests, service, hooks);
                        return replay.run(progress_every);
                      });
}

void bind_modeled_step(py::module_& m) {
  py::class_<Roofline>(m, "Roofline")
      .def(py::init<double, double, double, double>(), py::arg("flops_per_s"),
           py::arg("bytes_per_s"), py::arg("overhead_s"), py::arg("floor_s"))
      .def_readonly("flops_per_s", &Roofline::flops_per_s)
      .def_readonly("bytes_per_s", &Roofline::bytes_per_s)
      .def_readonly("overhead_s", &Roofline::overhead_s)
      .def_readonly("floor_s", &Roofline::floor_s);

  py::class_<ModeledStep>(m, "ModeledStep")
      .def(py::init([](const CostModel& cost, std::optional<DeploymentRates> deployment,
                       const Roofline& roofline, bool mtp, double acceptance,
                       const py::dict& rng_state, double reload_s_per_block) {
             return ModeledStep(cost, deployment, roofline, mtp, acceptance, pcg64_of(rng_state),
                                reload_s_per_block);
           }),
           py::arg("cost"), py::arg("deployment"), py::arg("roofline"), py::arg("mtp"),
           py::arg("acceptance"), py::arg("rng_state"), py::arg("reload_s_per_block") = 0.0)
      .def(
          "execute",
          [](ModeledStep& step, const ScheduleOutput& plan) {
            ModeledOutput out;
            step.execute(plan, out);
            py::object accepted = accepted_arrays(out, step.mtp());
            return py::make_tuple(out.seconds, std::move(out.costs), accepted);
          },
          py::arg("plan"),
          "(seconds, StepCosts, accepted: an int64 array of drafts accepted per rank, or None "
          "without MTP) of the plan's modeled step.");
}

void bind_colocated_loop(py::module_& m) {
  m.def(
      "replay_virtual",
      [](GuardedScheduler& s, ModeledStep& step, PyStepLog& log, Doubles arrival_s,
         Int64s prompt_len, Int64s max_new_tokens, std::optional<Int64s> hash_offsets,
         std::optional<Int64s> hash_ids, int64_t hash_block_size, int64_t concurrency,
         std::optional<py::array_t<double>> released_s, const py::object& sessions, bool overlap,
         int64_t progress_every, py::object on_progress) {
        HeldRequests h{std::move(arrival_s),    std::move(prompt_len), std::move(max_new_tokens),
                       std::move(hash_offsets), std::move(hash_ids),   std::move(released_s),
                       sessions_of(sessions)};
        return replay_virtual(s, step, log, h, hash_block_size, concurrency, overlap,
                              progress_every, std::move(on_progress));
      },
      py::arg("scheduler"), py::arg("step"), py::arg("log"), py::arg("arrival_s"),
      py::arg("prompt_len"), py::arg("max_new_tokens"), py::arg("hash_offsets") = py::none(),
      py::arg("hash_ids") = py::none(), py::arg("hash_block_size") = 0, py::arg("concurrency") = 0,
      py::arg("released_s") = py::none(), py::arg("sessions") = py::none(),
      py::arg("overlap") = false, py::arg("progress_every") = 64, py::arg("on_progress"),
      "Replay the requests through the scheduler on the virtual clock, each plan's step "
      "modeled by `step` and recorded into `log` (on_full() for each full chunk), as "
      "harness/replay/driver.py's loop would (a session trace's turns, `sessions` (parent, "
      "gap_s, subagent, session_id, live), as harness/replay/sessions.py would); "
      "on_progress(done, n) every progress_every steps "
      "and at the end, a false return stopping it. True if completed. The GIL is released "
      "but for the callbacks.");
}

void bind_session_turns(py::module_& m) {
  py::class_<HeldTurns>(m, "SessionTurns")
      .def(py::init<const py::object&, const Doubles&>(), py::arg("sessions"), py::arg("arrival_s"),
           "A session trace's turns, released as their parents end (csrc/replay/"
           "session_turns.hpp); sessions: (parent, gap_s, subagent, session_id, live).")
      .def(
          "next_s",
          [](HeldTurns& h) {
            return h.turns().empty() ? std::numeric_limits<double>::infinity() : h.turns().next_s();
          },
          "The next turn's arrival (inf: none is left to come).")
      .def(
          "take_due",
          [](HeldTurns& h, double now) -> std::optional<std::pair<double, int64_t>> {
            double t;
            int64_t row;
            if (!h.turns().take_due(now, t, row)) return std::nullopt;
            return std::make_pair(t, row);
          },
          py::arg("now"), "(arrival, row) of the next turn due by `now`, taken; None: none is.")
      .def(
          "ended",
          [](HeldTurns& h, int64_t row, double t) {
            if (row < 0 || row >= h.n()) throw py::index_error("no turn " + std::to_string(row));
            return h.turns().ended(row, t);
          },
          py::arg("row"), py::arg("t"),
          "Turn `row`'s last token is out, or it was rejected, at t (again: nothing); the "
          "session that has thereby ended, every turn of it, or -1.");
}

void bind_pd_loop(py::module_& m) {
  py::class_<PdService>(m, "PdService")
      .def(py::init<>())
#define FIELD(name) .def_readwrite(#name, &PdService::name)
          FIELD(prefill_router) FIELD(decode_router) FIELD(capacity_blocks) FIELD(block_size)
              FIELD(kv_bytes_per_token) FIELD(layers) FIELD(sender_bps) FIELD(receiver_bps)
                  FIELD(latency_s) FIELD(layerwise);
#undef FIELD

  m.def(
      "replay_disaggregated",
      [](const py::list& instances, Doubles arrival_s, Int64s prompt_len, Int64s max_new_tokens,
         std::optional<Int64s> hash_offsets, std::optional<Int64s> hash_ids,
         int64_t hash_block_size, int64_t concurrency,
         std::optional<py::array_t<double>> released_s, const py::object& sessions,
         const PdService& service, int64_t progress_every, py::object on_progress) {
        HeldRequests h{std::move(arrival_s),    std::move(prompt_len), std::move(max_new_tokens),
                       std::move(hash_offsets), std::move(hash_ids),   std::move(released_s),
                       sessions_of(sessions)};
        return replay_disaggregated(instances, h, hash_block_size, concurrency, service,
                                    progress_every, std::move(on_progress));
      },
      py::arg("instances"), py::arg("arrival_s"), py::arg("prompt_len"), py::arg("max_new_tokens"),
      py::arg("hash_offsets") = py::none(), py::arg("hash_ids") = py::none(),
      py::arg("hash_block_size") = 0, py::arg("concurrency") = 0,
      py::arg("released_s") = py::none(), py::arg("sessions") = py::none(), py::arg("service"),
      py::arg("progress_every") = 64, py::arg("on_progress"),
      "Replay the requests through a P/D deployment's instances ((role, index, scheduler, "
      "step, log) each, prefill first, a prefill instance's log made with handoff `kept`) "
      "on the virtual clock, as harness/replay/disaggregated.py would. True if completed.");
}

}  // namespace

void bind_replay(py::module_& m) {
  bind_modeled_step(m);
  bind_colocated_loop(m);
  bind_session_turns(m);
  bind_pd_loop(m);
}
