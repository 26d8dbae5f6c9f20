"""Apply a unified diff (what coding models write) to a candidate's flat source files, all or nothing.

Accepted: `--- a/NAME` / `+++ b/NAME` headers (the `a/` `b/` prefixes, a `candidate/` prefix and timestamps are
ignored), `/dev/null` to create or delete a file, `@@ -l,s +l,s @@` hunks. The line counts in hunk headers are
only a hint (models often get them wrong): a hunk is the run of ' ', '-', '+' (and empty) lines after its header,
and it applies where its old lines appear, exactly or up to trailing whitespace, nearest to the hinted line.
A hunk that matches nowhere fails the whole patch with a message that says which hunk and what it looked for, so
the model can re-read the file and try again; nothing is written unless every hunk of every file applies.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import BadInputError
from ..solutions import SOURCE_SUFFIXES

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
PREFIXES = ("a/", "b/", "candidate/", "./")


class PatchError(BadInputError):
    """The diff is malformed or does not apply; the message is written for the model that sent it."""


@dataclass
class Hunk:
    old_start: int
    lines: list[tuple[str, str]] = field(default_factory=list)  # (' ' | '-' | '+', text without newline)

    @property
    def old(self) -> list[str]:
        return [t for op, t in self.lines if op in " -"]

    @property
    def new(self) -> list[str]:
        return [t for op, t in self.lines if op in " +"]


@dataclass
class FilePatch:
    old_name: str | None   # None: the file is created
    new_name: str | None   # None: the file is deleted
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.new_name or self.old_name or "?"


def _clean_name(raw: str) -> str | None:
    name = raw.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    for prefix in PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
    if "/" in name or "\\" in name or name.startswith(".") or not name:
        raise PatchError(f"file {raw.strip()!r}: candidate sources are flat files (write `--- a/NAME`)")
    if not any(name.endswith(s) for s in SOURCE_SUFFIXES):
        raise PatchError(f"file {name!r}: not a source file ({', '.join(sorted(SOURCE_SUFFIXES))})")
    return name


def parse(diff: str) -> list[FilePatch]:
    lines = diff.replace("\r\n", "\n").split("\n")
    patches: list[FilePatch] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            patches.append(FilePatch(_clean_name(line[4:]), _clean_name(lines[index + 1][4:])))
            index += 2
            continue
        match = HUNK.match(line)
        if match:
            if not patches:
                raise PatchError("a hunk (@@ ... @@) before any `--- a/NAME` / `+++ b/NAME` header")
            hunk = Hunk(int(match.group(1)))
            index += 1
            while index < len(lines):
                body = lines[index]
                if body.startswith("@@") or (body.startswith("--- ") and index + 1 < len(lines)
                                             and lines[index + 1].startswith("+++ ")):
                    break
                if body.startswith("\\"):  # "\ No newline at end of file"
                    index += 1
                    continue
                if body == "":
                    # a blank context line (often sent without its leading space), or the diff's end
                    if all(rest == "" for rest in lines[index:]):
                        break
                    hunk.lines.append((" ", ""))
                elif body[0] in " -+":
                    hunk.lines.append((body[0], body[1:]))
                else:
                    break
                index += 1
            while hunk.lines and hunk.lines[-1] == (" ", ""):  # trailing blanks are the diff's end, not context
                hunk.lines.pop()
            if not any(op in "-+" for op, _ in hunk.lines):
                raise PatchError(f"hunk at line {hunk.old_start} of {patches[-1].name} changes nothing")
            patches[-1].hunks.append(hunk)
            continue
        index += 1  # prose, `diff --git`, `index ...` lines around the diff
    if not patches:
        raise PatchError("no file header found: send a unified diff (`--- a/NAME`, `+++ b/NAME`, `@@ ... @@`)")
    for patch in patches:
        if not patch.hunks:
            raise PatchError(f"{patch.name}: a file header without hunks")
    return patches


def _find(text_lines: list[str], block: list[str], hint: int) -> int | None:
    """Start index of `block` in `text_lines` nearest to `hint`: exact first, then ignoring trailing spaces."""
    if not block:
        return max(0, min(hint, len(text_lines)))
    for normalize in (lambda s: s, lambda s: s.rstrip()):
        wanted = [normalize(s) for s in block]
        first = wanted[0]
        hits = [i for i in range(len(text_lines) - len(block) + 1)
                if normalize(text_lines[i]) == first and [normalize(s) for s in text_lines[i:i + len(block)]] == wanted]
        if hits:
            return min(hits, key=lambda i: (abs(i - hint), i))
    return None


def _apply_file(text: str | None, patch: FilePatch) -> str | None:
    if patch.new_name is None:  # deletion (`+++ /dev/null`)
        return None
    lines = [] if text is None else text.split("\n")
    trailing_newline = text is None or text.endswith("\n")
    if text is not None and trailing_newline:
        lines = lines[:-1]
    offset = 0
    for number, hunk in enumerate(patch.hunks, 1):
        hint = max(0, hunk.old_start - 1 + offset)
        at = _find(lines, hunk.old, hint)
        if at is None:
            shown = "\n".join(hunk.old[:3])
            raise PatchError(f"{patch.name}: hunk {number} of {len(patch.hunks)} (@@ -{hunk.old_start} @@) does not "
                             f"apply: its old lines were not found in the file, starting with:\n{shown}\n"
                             f"Re-read the file (read_file) and send the hunk with the file's exact lines.")
        # context lines keep the file's own text (they may differ from the hunk's in trailing whitespace)
        replacement, cursor = [], at
        for op, text in hunk.lines:
            if op == " ":
                replacement.append(lines[cursor])
                cursor += 1
            elif op == "-":
                cursor += 1
            else:
                replacement.append(text)
        lines[at:at + len(hunk.old)] = replacement
        offset += len(replacement) - len(hunk.old)
    return "\n".join(lines) + ("\n" if trailing_newline or text is None else "")


def apply(files: dict[str, str], diff: str) -> tuple[dict[str, str], list[str]]:
    """The new file map and one line per changed file; raises PatchError and changes nothing on any failure."""
    out = dict(files)
    report = []
    for patch in parse(diff):
        if patch.old_name is None:
            if patch.new_name in out:
                raise PatchError(f"{patch.new_name}: exists already (the diff creates it from /dev/null)")
            current = None
        else:
            if patch.old_name not in out:
                raise PatchError(f"{patch.old_name}: no such file in the candidate ({', '.join(sorted(out))})")
            current = out[patch.old_name]
        result = _apply_file(current, patch)
        added = sum(op == "+" for h in patch.hunks for op, _ in h.lines)
        removed = sum(op == "-" for h in patch.hunks for op, _ in h.lines)
        if result is None:
            out.pop(patch.old_name)
            report.append(f"{patch.old_name}: deleted")
            continue
        if patch.old_name and patch.old_name != patch.new_name:
            out.pop(patch.old_name)
        out[patch.new_name] = result
        verb = "created" if current is None else "patched"
        report.append(f"{patch.new_name}: {verb}, {len(patch.hunks)} hunk(s), +{added} -{removed} lines")
    return out, report
