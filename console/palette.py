"""Command-palette provider of the main screen: the actions that have no key of their own."""
from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Callable, Iterator

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from console.screens.main import MainScreen


class MainCommands(Provider):
    def _commands(self) -> Iterator[tuple[str, Callable[[], object], str]]:
        screen: MainScreen = self.screen  # type: ignore[assignment]
        model = screen.model
        yield "Toggle alerts (bell and notifications)", screen.action_toggle_alerts, "also: a"
        yield "Toggle chart x axis (iterations / wall time)", screen.action_toggle_axis, "also: t"
        yield "Show the 'since you last looked' digest", screen.action_digest, "also: g"
        yield "Attempts log: all branches", partial(screen.set_log_filter, None), ""
        yield "List standing prompts in the activity log (/standing)", partial(screen.send, "/standing"), ""
        yield "Interrupt the running evaluation (/abort)", partial(screen.send, "/abort"), ""
        yield "Stop the agent after the current evaluation (/stop)", partial(screen.send, "/stop"), ""
        if model.state.focus:
            yield f"Clear the focus on {model.state.focus} (/unfocus)", partial(screen.send, "/unfocus"), ""
        for b in model.state.branches.values():
            yield f"Attempts log: only {b.name}", partial(screen.set_log_filter, b.name), ""
            if not b.live:
                continue
            yield f"Focus on {b.name} (/focus {b.name})", partial(screen.send, f"/focus {b.name}"), ""
            verb = "Resume" if b.state == "paused" else "Pause"
            yield f"{verb} {b.name}", partial(screen.send, f"/{verb.lower()} {b.name}"), "also: space"
            yield f"Fork {b.name} …", partial(screen.fork, b.name), "also: f"
            yield f"Kill {b.name} …", partial(screen.kill, b.name), "also: x"
        for s in model.state.steering.values():
            if s.scope == "standing" and s.status not in ("dropped", "rejected"):
                yield f"Drop standing prompt {s.id}: {s.text[:40]}", partial(screen.send, f"/drop {s.id}"), ""

    async def discover(self) -> Hits:
        for text, command, help_text in self._commands():
            yield DiscoveryHit(text, command, help=help_text or None)

    async def search(self, query: str) -> Hits:
        screen: MainScreen = self.screen  # type: ignore[assignment]
        digits = query.strip().lstrip("#")
        if digits.isdigit() and screen.model.state.attempt(int(digits)) is not None:
            yield Hit(1.0, f"Open attempt #{digits}", partial(screen.open_detail, int(digits)),
                      help="diff, per-case results, transcript")
        matcher = self.matcher(query)
        for text, command, help_text in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), command, text=text, help=help_text or None)
