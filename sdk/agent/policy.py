"""Human policy for the loop: prose rules injected into every prompt, and the static anti-hacking scan.

The scan's built-in layer is the gate's own scan (`sdk.gate.scan`: forbidden imports, pointer keys, module state,
side streams, host compute, ...), so a candidate is judged by the same rules before it is built as it is inside
the gate. A policy TOML adds rules on top; each becomes a regex the scan also applies:

    rules = ["extra sentence injected into every prompt"]
    [[forbidden]]
    id = "no_cub"            # a new rule, or the id of an earlier file rule to replace it
    pattern = 'cub::'        # Python regex, multiline mode
    files = ["*.cu", "*.cuh"]
    severity = "block"       # or "warn" (reported to the roles, not blocking)
    message = "why"

Legitimate caches follow the gate's protocol: the module sets FIB_DECLARED_CACHE = "<why>" and defines
fib_cache_clear(); the bench then reports cold and warm latency, and the evaluator may accept only with both.
"""
from __future__ import annotations

import fnmatch
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInputError
from ..gate import scan as gate_scan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ANY_SOURCE = ("*.py", "*.cu", "*.cuh", "*.cpp", "*.h", "*.hpp", "*.cc", "*.c", "*.cxx")
DECLARED_CACHE = "FIB_DECLARED_CACHE"


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: str
    files: tuple[str, ...]
    message: str
    severity: str = "block"


@dataclass(frozen=True)
class Finding:
    rule: str
    file: str
    line: int
    severity: str
    text: str

    def as_dict(self) -> dict:
        return self.__dict__.copy()


# Reported to the roles but not blocking: the gate's timing decides whether they cost anything.
ADVISORY_RULES = (
    Rule("host_sync", r"\.item\s*\(\s*\)|torch\.cuda\.synchronize|cudaDeviceSynchronize|cudaStreamSynchronize",
         ANY_SOURCE, "host synchronisation on the hot path", severity="warn"),
)

DEFAULT_TEXT = [
    "Only the kernel sources of the candidate may change; the harness, gate, reference, workloads and configs are "
    "read-only.",
    "Forbidden: input-identity caches, cross-call reuse of results or buffers that are not fully recomputed, "
    "sample- or workload-specific shortcuts, hidden global state, precomputed answers.",
    "A legitimate cache is declared with FIB_DECLARED_CACHE = \"<why>\" and fib_cache_clear() in its module; it is "
    "timed cold and warm and both latencies are reported.",
    "Every candidate is correctness-gated on all selected workloads before its latency counts.",
]


@dataclass
class Policy:
    rules: list[Rule] = field(default_factory=lambda: list(ADVISORY_RULES))
    text: list[str] = field(default_factory=lambda: list(DEFAULT_TEXT))
    source: str = "builtin"
    raw: str = ""

    def scan(self, files: dict[str, str]) -> list[Finding]:
        findings = [Finding(f.rule, f.path, f.line, "block", f.message)
                    for f in gate_scan.scan_sources(sorted(files.items()))]
        for name, content in sorted(files.items()):
            lines = content.splitlines()
            for rule in self.rules:
                if not any(fnmatch.fnmatch(name, pat) for pat in rule.files):
                    continue
                for match in re.finditer(rule.pattern, content, re.MULTILINE):
                    line = content.count("\n", 0, match.start()) + 1
                    findings.append(Finding(rule.id, name, line, rule.severity,
                                            f"{rule.message}: {lines[line - 1].strip()[:120]}"))
        return findings


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "block"]


def declares_cache(files: dict[str, str]) -> bool:
    return any(DECLARED_CACHE in text for name, text in files.items() if name.endswith(".py"))


def load(path: str | Path | None) -> Policy:
    if path is None:
        return Policy()
    path = Path(path)
    try:
        raw = path.read_text()
        data = tomllib.loads(raw)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInputError(f"{path}: cannot read policy ({exc})") from None
    rules = {r.id: r for r in ADVISORY_RULES}
    for entry in data.get("forbidden", []):
        try:
            rule = Rule(id=entry["id"], pattern=entry["pattern"], files=tuple(entry.get("files", ANY_SOURCE)),
                        message=entry.get("message", entry["id"]), severity=entry.get("severity", "block"))
            re.compile(rule.pattern)
        except (KeyError, TypeError, re.error) as exc:
            raise BadInputError(f"{path}: bad [[forbidden]] entry {entry!r} ({exc})") from None
        if rule.severity not in ("block", "warn"):
            raise BadInputError(f"{path}: rule {rule.id}: severity must be 'block' or 'warn'")
        rules[rule.id] = rule
    return Policy(rules=list(rules.values()), text=DEFAULT_TEXT + list(data.get("rules", [])), source=str(path),
                  raw=raw)
