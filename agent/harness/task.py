"""Load and validate a GPU MODE problem directory (task.yml, reference.py, ...) without importing it."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REQUIRED_REFERENCE_NAMES = ("generate_input", "check_implementation")
REPO_ROOT = Path(__file__).resolve().parents[2]
BUILTIN_TASKS = REPO_ROOT / "kernels"
DEFAULT_TASK = "qr"


class TaskError(ValueError):
    """A task directory that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Task:
    name: str
    path: Path
    description: str
    tests: list[dict[str, Any]]
    benchmarks: list[dict[str, Any]]
    ranking_by: str
    cpu_tests: list[dict[str, Any]]
    cpu_benchmarks: list[dict[str, Any]]
    baseline: Path | None
    candidates_dir: Path | None
    timeouts: dict[str, float] = field(default_factory=dict)

    def cases(self, on_gpu: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(tests, benchmarks) for the device: the CPU uses the small `steer.cpu_*` cases when given."""
        if on_gpu:
            return self.tests, self.benchmarks
        return self.cpu_tests or self.tests, self.cpu_benchmarks or self.benchmarks

    def seed_candidates(self) -> list[Path]:
        """Seed kernels in `candidates/`, one per family, the baseline excluded."""
        if self.candidates_dir is None or not self.candidates_dir.is_dir():
            return []
        found = sorted(p for p in self.candidates_dir.glob("*.py") if not p.name.startswith("_"))
        return [p for p in found if self.baseline is None or p.resolve() != self.baseline.resolve()]

    def seeds_named(self, families: list[str]) -> list[Path]:
        """The seed candidates whose file names (without .py) are `families`, in that order; all of
        them for none. A branch's spelling (wy-blocked for wy_blocked.py) is taken too. TaskError
        names a family the task has no seed for."""
        seeds = self.seed_candidates()
        if not families:
            return seeds
        by_name = {p.stem: p for p in seeds}
        by_name.update({p.stem.replace("_", "-"): p for p in seeds if p.stem.replace("_", "-") not in by_name})
        missing = [f for f in families if f not in by_name]
        if missing:
            raise TaskError(f"task {self.name} has no seed family {', '.join(map(repr, missing))} "
                            f"(its seeds: {', '.join(p.stem for p in seeds) or 'none'})")
        chosen = [by_name[f] for f in families]
        if len(set(chosen)) != len(chosen):
            raise TaskError(f"the same seed family is named twice in {','.join(families)}")
        return chosen

    def files(self) -> list[Path]:
        """The files a worker gets a copy of: every .py/.yml beside task.yml (not candidates/)."""
        return sorted(p for p in self.path.iterdir() if p.is_file() and p.suffix in (".py", ".yml", ".yaml"))


def resolve_task(spec: str | Path | None) -> Path:
    """A task given by directory or by the name of a bundled task (`qr`)."""
    if spec is None:
        spec = DEFAULT_TASK
    path = Path(spec).expanduser()
    if path.is_dir():
        return path.resolve()
    bundled = BUILTIN_TASKS / str(spec)
    if not path.is_absolute() and bundled.is_dir():
        return bundled.resolve()
    raise TaskError(f"task {str(spec)!r}: no such directory (bundled tasks: {', '.join(bundled_tasks())})")


def bundled_tasks() -> list[str]:
    if not BUILTIN_TASKS.is_dir():
        return []
    return sorted(p.name for p in BUILTIN_TASKS.iterdir() if (p / "task.yml").is_file())


def _case_list(doc: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    cases = doc.get(key) or []
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise TaskError(f"{where}: `{key}` must be a list of mappings (one test spec each)")
    return [dict(c) for c in cases]


def _reference_names(path: Path) -> set[str]:
    """Top-level names reference.py defines, assigns or imports."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise TaskError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # null bytes and the like
        raise TaskError(f"{path}: not Python source ({exc})") from None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def load_task(spec: str | Path | None = None) -> Task:
    path = resolve_task(spec)
    yml = path / "task.yml"
    if not yml.is_file():
        raise TaskError(f"{path}: no task.yml (a GPU MODE problem directory needs one)")
    try:
        doc = yaml.safe_load(yml.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise TaskError(f"{yml}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    except UnicodeDecodeError:
        raise TaskError(f"{yml}: not UTF-8 text") from None
    if not isinstance(doc, dict):
        raise TaskError(f"{yml}: must be a mapping with `tests` and `benchmarks`")
    reference = path / "reference.py"
    if not reference.is_file():
        raise TaskError(f"{path}: no reference.py (it must provide {', '.join(REQUIRED_REFERENCE_NAMES)})")
    missing = [n for n in REQUIRED_REFERENCE_NAMES if n not in _reference_names(reference)]
    if missing:
        raise TaskError(f"{reference}: does not define {', '.join(missing)}")

    tests = _case_list(doc, "tests", str(yml))
    benchmarks = _case_list(doc, "benchmarks", str(yml))
    if not tests:
        raise TaskError(f"{yml}: no `tests`")
    steer = doc.get("steer") or {}
    if not isinstance(steer, dict):
        raise TaskError(f"{yml}: `steer` must be a mapping")
    ranking = str(doc.get("ranking_by", "geom"))
    if ranking not in ("geom", "mean", "last"):
        raise TaskError(f"{yml}: ranking_by {ranking!r} is not one of geom, mean, last")
    baseline = path / steer["baseline"] if steer.get("baseline") else None
    if baseline is not None and not baseline.is_file():
        raise TaskError(f"{yml}: steer.baseline {steer['baseline']!r} does not exist")
    candidates = path / str(steer.get("candidates", "candidates"))
    timeouts = {k: float(doc[k]) for k in ("test_timeout", "benchmark_timeout", "ranked_timeout") if k in doc}
    return Task(
        name=path.name,
        path=path,
        description=str(doc.get("description", "")).strip(),
        tests=tests,
        benchmarks=benchmarks,
        ranking_by=ranking,
        cpu_tests=_case_list(steer, "cpu_tests", f"{yml} steer"),
        cpu_benchmarks=_case_list(steer, "cpu_benchmarks", f"{yml} steer"),
        baseline=baseline,
        candidates_dir=candidates if candidates.is_dir() else None,
        timeouts=timeouts,
    )
