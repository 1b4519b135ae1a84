"""The fenced blocks of README.md and docs/*.md that are run or shown: reading them, running the
runnable ones on loopback, and the shape of a printed line.

- A shell block whose fence reads ```` ```sh runnable ```` runs as written on a machine where
  ``make test`` has run, against a moto that the runner starts (``http://127.0.0.1:5000`` in the
  block is that moto's address), in a scratch directory.
- A block preceded by a line ``<!-- output: NAME -->`` shows what a command printed;
  ``make docs-outputs`` (bench/docs_outputs.py) rewrites it from a real run, and the tests hold
  its lines' shapes (``shape``) against what the code prints.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Where the documents say moto is; a runner puts its own moto's address there.
DOC_MOTO = "http://127.0.0.1:5000"

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_MARK = re.compile(r"<!-- output: ([\w-]+) -->[ \t]*\n$")
#: A job id as ``new_job_id`` makes them: NAME-YYYYMMDD-HHMMSS-xxxx.
JOB_ID = re.compile(r"\b[a-z0-9][a-z0-9-]*-\d{8}-\d{6}-[0-9a-f]{4}\b")
#: Lines of a runnable block the runner does itself: set-up ``make test`` has done, and moto.
_DONE_ALREADY = (re.compile(r"^make (setup|sam-env)\b"), re.compile(r"\bmoto_server\b.*&\s*$"))
#: Time a command of a runnable block may take (a 4-worker job over S3 on moto is the longest).
COMMAND_TIMEOUT_S = 300


def documents() -> list[Path]:
    """README.md, then the docs pages: the order a reader (and a runner) takes them in."""
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    language: str  # the fence's first word ("sh", "" ...)
    flags: tuple[str, ...]  # the fence's other words ("runnable")
    body: str
    start: int  # offsets of the body in the document's text
    end: int
    output: str | None  # NAME of a shown output (<!-- output: NAME -->)

    @property
    def runnable(self) -> bool:
        return self.language == "sh" and "runnable" in self.flags

    @property
    def where(self) -> str:
        line = self.path.read_text()[: self.start].count("\n")
        return f"{self.path.relative_to(ROOT)}:{line}"


def blocks(path: Path, text: str | None = None) -> list[Block]:
    text = path.read_text() if text is None else text
    found = []
    for match in _FENCE.finditer(text):
        words = match.group(1).split()
        mark = _MARK.search(text[: match.start()][-200:])
        found.append(
            Block(
                path, words[0] if words else "", tuple(words[1:]), match.group(2), match.start(2), match.end(2),
                mark.group(1) if mark else None,
            )
        )  # fmt: skip
    return found


def outputs(path: Path) -> dict[str, Block]:
    return {b.output: b for b in blocks(path) if b.output}


def commands(block: Block) -> list[str]:
    """A shell block's commands, continuation lines joined, comments and blank lines out."""
    joined = block.body.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


# --- the shape of a printed line ------------------------------------------------------------------

_SHAPES = (
    (JOB_ID, "JOB"),
    (re.compile(r"s3://[^/\s]+"), "s3://BUCKET"),
    (re.compile(r"(W=\d+(?: \d+ep)?) [0-9a-f]{4}(?!\S)"), r"\1 ID"),  # a job id's tail in compare's run labels
    (re.compile(r"\d[\d,]*(\.\d+)?"), "9"),
    (re.compile(r"(?<![\w.])9(ms|s|m|h|d)(?![\w-])"), "T"),  # a time as format_time writes it
    (re.compile(r"(?<![\w.])9(B|KB|MB|GB|TB)\b"), "S"),  # a size
    (re.compile(r"\$9"), "$"),
    (re.compile(r"─+"), "─"),  # a table's rule is as wide as its columns
)


def shape(line: str) -> str:
    """A printed line with what varies from run to run (figures, times, sizes, job ids, buckets)
    replaced by placeholders and runs of spaces by one: its headers, words and layout stay."""
    for pattern, placeholder in _SHAPES:
        line = pattern.sub(placeholder, line)
    return " ".join(line.split())


def shown_lines(block: Block) -> list[str]:
    """An output block's lines, without ``...`` (lines left out) and blank lines."""
    return [line for line in block.body.splitlines() if line.strip() and line.strip() != "..."]


def unmatched(block: Block, printed: str) -> list[str]:
    """The block's lines that no line of ``printed`` has the shape of."""
    shapes = {shape(line) for line in printed.splitlines()}
    return [line for line in shown_lines(block) if shape(line) not in shapes]


# --- running a runnable block -------------------------------------------------------------------


@dataclass
class Runner:
    """Runs runnable blocks one after another in ``workdir`` (state carries over, as for a reader
    following the page), with ``moto_url`` for the documents' moto."""

    workdir: Path
    moto_url: str
    job_id: str | None = None  # the last job a command started: what JOB_ID in a block stands for
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for venv in ROOT.glob(".venv*"):
            link = self.workdir / venv.name
            if venv.is_dir() and not link.exists():
                link.symlink_to(venv)
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LAMBDAML_HOME": str(home / ".lambdaml"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "LANG": "C.UTF-8",
            **self.env,
        }

    def command(self, line: str) -> str | None:
        """The line as it runs here, or None for what the runner has done already."""
        if any(p.search(line.strip()) for p in _DONE_ALREADY):
            return None
        line = line.replace(DOC_MOTO, self.moto_url)
        if "JOB_ID" in line:
            assert self.job_id, f"{line!r} names JOB_ID before any job ran"
            line = line.replace("JOB_ID", self.job_id)
        for word in line.split():
            self._copy(word)
        return line

    def _copy(self, word: str) -> None:
        """A repository file the command names (a job file), copied here at the same path, with
        this moto where it names the documents'."""
        if "/" not in word or word.startswith((".venv", "-")) or (self.workdir / word).exists():
            return
        source = ROOT / word
        if source.is_file():
            target = self.workdir / word
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source.read_text().replace(DOC_MOTO, self.moto_url))

    def run(self, block: Block) -> str:
        """Every command of the block, in order; what they printed (stdout and stderr), with this
        moto's address put back as the documents' (what a reader following the page sees).
        Raises AssertionError naming the command where one fails."""
        return "".join(self.run_each(block))

    def run_each(self, block: Block) -> list[str]:
        """``run``, what each command printed on its own (those the runner does itself left out)."""
        printed = []
        for line in commands(block):
            command = self.command(line)
            if command is None:
                continue
            done = subprocess.run(
                ["bash", "-c", command], cwd=self.workdir, env=self.env, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT_S, check=False,
            )  # fmt: skip
            out = done.stdout.replace(self.moto_url, DOC_MOTO)
            assert done.returncode == 0, f"{block.where}: `{line}` exited {done.returncode}:\n{out[-3000:]}"
            started = re.search(rf"^job ({JOB_ID.pattern})", out, re.M)
            if started:
                self.job_id = started.group(1)
            printed.append(out)
        return printed

    def stop_stacks(self) -> None:
        """Take down the local stacks a block brought up and left up (it failed before its ``local down``)."""
        for record in (Path(self.env["LAMBDAML_HOME"]) / "stacks").glob("*.json"):
            subprocess.run(
                [str(ROOT / ".venv" / "bin" / "lambdaml"), "local", "down", "--name", record.stem], cwd=self.workdir,
                env=self.env, capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False,
            )  # fmt: skip
