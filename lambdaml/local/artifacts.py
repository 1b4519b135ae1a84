"""What the local stack runs: the functions as ``sam build`` built them, the layer Lambda's
python3.11 runtime provides, and the torch worker's environment built from its image's files.

Nothing of the development venv reaches a function: each runs from its build directory with
the runtime layer (awslambdaric, and the boto3/botocore the runtime bundles) beside it, so a
package that ``functions/requirements.txt`` lacks fails here as it would on AWS. Each
artifact is built once and rebuilt when what it is made of changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from lambdaml.errors import ConfigError

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
SAM_BUILD = BUILD / "sam"
RUNTIME_LAYER = BUILD / "lambda-runtime"
TORCH_WORKER = BUILD / "torch-worker"
RUNTIME_REQUIREMENTS = ROOT / "requirements-lambda-runtime.txt"
BUILD_TIMEOUT_S = 900.0
# As the Makefile's SAM_OFFLINE: nothing a build does may reach AWS.
_OFFLINE = {
    "AWS_ACCESS_KEY_ID": "dummy",
    "AWS_SECRET_ACCESS_KEY": "dummy",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "SAM_CLI_TELEMETRY": "0",
}


@contextlib.contextmanager
def _building() -> Iterator[None]:
    """One build at a time across processes (two `local up` at once, or parallel tests)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    with (BUILD / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _newest_source(*roots: Path) -> float:
    """The latest modification time of any file under ``roots`` (links followed, caches skipped)."""
    newest = 0.0
    for root in roots:
        if root.is_file():
            newest = max(newest, root.stat().st_mtime)
            continue
        for folder, dirs, files in os.walk(root, followlinks=True):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                newest = max(newest, (Path(folder) / name).stat().st_mtime)
    return newest


def _run(command: list[str], what: str, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    log.info("building %s: %s", what, " ".join(command))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"building {what} took over {BUILD_TIMEOUT_S:g}s") from None
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ConfigError(f"building {what} failed: {last[0]}")


def _sam_build(template: Path) -> Path:
    """The template's zip functions, built by ``sam build`` (what ``sam deploy`` would upload)."""
    stamp = SAM_BUILD / "template.yaml"
    sources = _newest_source(ROOT / "functions", template)
    if stamp.exists() and stamp.stat().st_mtime >= sources:
        return SAM_BUILD
    sam = ROOT / ".venv-sam" / "bin" / "sam"
    if not sam.exists():
        raise ConfigError("sam is missing: run 'make sam-env' first")
    shutil.rmtree(SAM_BUILD, ignore_errors=True)
    command = [str(sam), "build", "-t", str(template), "--build-dir", str(SAM_BUILD)]
    _run(command, "the functions (sam build)", cwd=ROOT, env={**os.environ, **_OFFLINE})
    return SAM_BUILD


def _fingerprint(*files: Path) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _pip_target(target: Path, requirements: list[Path], what: str, *, no_deps: bool) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"]
    command += [str(target)] + (["--no-deps"] if no_deps else [])
    for path in requirements:
        command += ["-r", str(path)]
    _run(command, what)


def _runtime_layer() -> Path:
    """awslambdaric and the runtime's SDK, pinned in requirements-lambda-runtime.txt."""
    stamp = RUNTIME_LAYER / ".fingerprint"
    wanted = _fingerprint(RUNTIME_REQUIREMENTS)
    if stamp.exists() and stamp.read_text() == wanted:
        return RUNTIME_LAYER
    shutil.rmtree(RUNTIME_LAYER, ignore_errors=True)
    _pip_target(RUNTIME_LAYER, [RUNTIME_REQUIREMENTS], "the Lambda runtime layer", no_deps=True)
    stamp.write_text(wanted)
    return RUNTIME_LAYER


def image_copies(dockerfile: Path) -> list[tuple[Path, str]]:
    """What the Dockerfile copies into the task root: (source under the repository, path in the task root)."""
    copies = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "COPY" and words[2].startswith("${LAMBDA_TASK_ROOT}/"):
            copies.append((ROOT / words[1], words[2].removeprefix("${LAMBDA_TASK_ROOT}/")))
    if not copies:
        raise ConfigError(f"{dockerfile} copies nothing into ${{LAMBDA_TASK_ROOT}}")
    return copies


def _torch_worker() -> tuple[Path, Path]:
    """The torch worker as its image holds it: (task root, packages), from functions/worker_image/.

    The task root gets what the Dockerfile copies there, read from its COPY lines so the two
    cannot drift; the packages are its two requirement files. The image's base provides the
    runtime layer.
    """
    image = ROOT / "functions" / "worker_image"
    dockerfile = image / "Dockerfile"
    requirements = [image / "requirements.txt", ROOT / "functions" / "requirements.txt"]
    task, packages = TORCH_WORKER / "task", TORCH_WORKER / "packages"
    stamp = TORCH_WORKER / ".fingerprint"
    wanted = _fingerprint(*requirements)
    if not (stamp.exists() and stamp.read_text() == wanted):
        shutil.rmtree(TORCH_WORKER, ignore_errors=True)
        _pip_target(packages, requirements, "the torch worker's packages", no_deps=False)
        stamp.write_text(wanted)
    copies = image_copies(dockerfile)
    copied = TORCH_WORKER / ".copied"
    if not copied.exists() or _newest_source(dockerfile, *(source for source, _ in copies)) > copied.stat().st_mtime:
        shutil.rmtree(task, ignore_errors=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for source, inside in copies:
            (task / inside).parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, task / inside, ignore=ignore)
            else:
                shutil.copy2(source, task / inside)
        copied.touch()
    return task, packages


def sam_build(template: Path) -> Path:
    """The template's zip functions, built by ``sam build`` (what ``sam deploy`` would upload)."""
    with _building():
        return _sam_build(template)


def runtime_layer() -> Path:
    """awslambdaric and the runtime's SDK, pinned in requirements-lambda-runtime.txt."""
    with _building():
        return _runtime_layer()


def torch_worker() -> tuple[Path, Path]:
    """The torch worker as its image holds it: (task root, packages); see ``_torch_worker``."""
    with _building():
        return _torch_worker()


def main() -> int:
    """Build the runtime layer and the torch worker's environment now (``make test`` does, beside
    its other set-up), so the first ``local up`` finds them built."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        runtime_layer()
        torch_worker()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
