"""Plain-text views of a session for the command line: `steer ls`, `steer status`, and the headless log lines."""
from __future__ import annotations

import time

from agent import events as ev
from agent.session import EventReader, Session
from agent.state import NOISE_FLOOR, SessionState, fold


def load_state(session: Session) -> SessionState:
    return fold(EventReader(session.events_path).iter_all())


def _us(v: float | None) -> str:
    return f"{v:.2f} µs" if v else "-"


def _x(v: float | None) -> str:
    return f"{v:.3f}x" if v else "-"


def run_state(session: Session, state: SessionState) -> str:
    pid = session.holder()
    if pid:
        return f"running (pid {pid})"
    if state.running:
        return "not running (the agent died; resume with steer run)"
    return f"stopped ({state.stop_reason})" if state.stop_reason else "new"


def format_event(e: ev.Event, state: SessionState) -> str | None:
    """One line for the headless log, or None for events not worth a line."""
    if isinstance(e, ev.SessionStarted):
        return f"session {e.name}: task {e.task}, proposer {e.proposer}, device {e.device} {e.device_name}".rstrip()
    if isinstance(e, ev.SessionResumed):
        return f"resumed at iteration {e.next_iteration} (pid {e.pid})"
    if isinstance(e, ev.BaselineMeasured):
        return f"baseline: {_us(e.geomean_us)}" + ("" if e.ok else f" (failed: {e.message})")
    if isinstance(e, ev.BranchCreated):
        return f"branch {e.branch}: {_us(e.geomean_us)} ({e.source})"
    if isinstance(e, ev.NoiseMeasured):
        return noise_line(e)
    if isinstance(e, ev.NoiseFloorSet):
        return floor_set_line(e, state)
    if isinstance(e, ev.AttemptCommitted):
        a = state.attempt(e.iteration)
        # the reason of a win too: its re-timings are how a person checking in tells a real gain
        # from a head that was timed slow once (the cap keeps a runaway reason off the terminal)
        why = f" - {e.reason}" if e.reason else ""
        return (f"#{e.iteration} {e.branch} {e.verdict} {_us(e.geomean_us)} {_x(e.speedup)} "
                f"{(a.summary if a else e.summary)[:80]}{why}")[:480]
    if isinstance(e, ev.BranchStateChanged):
        return f"branch {e.branch} {e.state}" + (f": {e.reason}" if e.reason else "")
    if isinstance(e, ev.PlateauDetected):
        return f"plateau on {e.branch}: {e.attempts_since_gain} attempts, {e.minutes_since_gain:.0f} min without a gain"
    if isinstance(e, ev.SteeringApplied):
        return f"steering {e.id} applied" + (f" in #{e.iteration}" if e.iteration else "") + (f": {e.detail}" if e.detail else "")
    if isinstance(e, ev.SteeringRejected):
        return f"steering {e.id} rejected: {e.reason}"
    if isinstance(e, ev.BudgetReached):
        return f"budget reached: {e.kind} {e.value:g} of {e.limit:g}"
    if isinstance(e, ev.ErrorEvent):
        return f"error in {e.where}: {e.message}"
    if isinstance(e, ev.Recovery):
        return f"recovery: {e.action}" + (f" ({e.detail})" if e.detail else "")
    if isinstance(e, ev.AgentStopped):
        return f"agent stopped: {e.reason} after {e.iterations} iterations" + (f" ({e.detail})" if e.detail else "")
    return None


def noise_line(e: ev.NoiseMeasured) -> str:
    """The measured floor, the pair of timings that set it, and each seed's own (its family's floor)."""
    if not e.samples:
        return f"noise floor {100 * e.floor:.1f}% (no seed could be timed again)"
    worst = max(e.samples, key=lambda s: float(s.get("gap") or 0.0))
    timed = f"the same code timed {_us(worst.get('first_us'))} and {_us(worst.get('again_us'))} on {worst.get('branch')}"
    if len(e.samples) == 1:
        return f"noise floor {100 * e.floor:.1f}%: gains smaller than that are not accepted ({timed})"
    own = ", ".join(f"{s.get('branch')} {100 * max(NOISE_FLOOR, float(s.get('gap') or 0.0)):.1f}%" for s in e.samples)
    return (f"noise floor {100 * e.floor:.1f}% at most: each family's gains must clear its own ({own}; "
            f"the largest: {timed})")


def family_floors_text(state: SessionState) -> str:
    """Each family's measured floor ("cholqr 3.2%, superpanel 1.3%"), while no floor is set for all."""
    if state.noise_floor_set is not None:
        return ""
    return ", ".join(f"{fam} {100 * x:.1f}%" for fam, x in sorted(state.family_floors().items()))


def floor_set_line(e: ev.NoiseFloorSet, state: SessionState) -> str:
    by = f" by {e.steering_id}" if e.steering_id else ""
    if e.floor is None:
        measured = f"{100 * state.noise_floor:.1f}%" if state.noise_floor is not None else "none"
        families = family_floors_text(state)
        return f"noise floor back to the measured one ({measured}{'; by family: ' + families if families else ''}){by}"
    return f"noise floor set to {100 * e.floor:.1f}%{by}"


def ls_lines(sessions: list[Session]) -> list[str]:
    rows = [("NAME", "STATE", "TASK", "PROPOSER", "ITER", "BEST", "SPEEDUP")]
    for s in sessions:
        st = load_state(s)
        rows.append((s.name, run_state(s, st), st.task or "-", st.proposer or "-", str(st.iteration),
                     _us(st.best_us), _x(st.best_speedup)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def status_text(session: Session, state: SessionState) -> str:
    hours = state.elapsed_s() / 3600
    rate = state.evals_per_hour()
    out = [f"session {session.name}: {run_state(session, state)}",
           f"task {state.task}, proposer {state.proposer}" + (f" ({state.model})" if state.model else "")
           + f", device {state.device} {state.device_name}".rstrip(),
           f"iterations {state.iteration}, evaluations {state.evaluations}, {hours:.2f} h"
           + (f", {rate:.0f}/h" if rate else "") + (f", ${state.cost_usd:.2f}" if state.cost_usd else ""),
           f"baseline {_us(state.baseline_us)}, best {_us(state.best_us)} ({_x(state.best_speedup)})"
           + (f", noise floor {100 * state.floor[0]:.1f}% ({state.floor[1]})" if state.floor else "")
           + (f", focus {state.focus}" if state.focus else "")]
    out += [f"noise floor by family: {families}"] if (families := family_floors_text(state)) else []
    out.append("")
    rows = [("BRANCH", "STATE", "BEST", "SPEEDUP", "ATTEMPTS", "ACCEPTED", "SINCE GAIN")]
    for b in state.branches.values():
        speed = state.baseline_us / b.best_us if state.baseline_us and b.best_us else None
        label = b.state + (" (plateau)" if b.plateau else "")
        rows.append((b.name, label, _us(b.best_us), _x(speed), str(b.attempts), str(b.accepted), str(b.since_gain)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    out += ["", "last attempts:"]
    for a in state.attempts[-10:]:
        why = f"  ({a.message[:60]})" if a.verdict in ("failed", "rejected") and a.message else ""
        out.append(f"  #{a.iteration:<5} {a.branch:<20} {a.verdict:<9} {_us(a.geomean_us):>12}  {a.summary[:60]}{why}")
    if not state.attempts:
        out.append("  (none yet)")
    pending = state.pending_steering()
    out += ["", "pending steering:" if pending else "pending steering: none"]
    for s in pending:
        target = s.target or "all"
        out.append(f"  {s.id} [{target}, {s.scope}, {s.status}] {s.text[:80]}")
    if state.errors:
        e = state.errors[-1]
        out += ["", f"last error ({time.strftime('%H:%M', time.localtime(e.ts))}): {e.where}: {e.message[:160]}"]
    return "\n".join(out)
