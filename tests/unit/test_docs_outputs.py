"""The outputs README.md and docs/ show are what the code prints today: for every block marked
``<!-- output: NAME -->``, the printers that made it are run on canned results (real results kept
in tests/fixtures/job_results/) and the block must have each table's title and column names, and each
of its lines the shape of what the printer prints for a line of that kind (the same first words),
figures aside. ``make docs-outputs`` rewrites the blocks from real runs; tests/e2e/test_docs_runnable.py
holds every line of the tour's blocks to a real run."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from lambdaml import cli
from lambdaml.runtime.reports import JobResult
from tests.docs_blocks import Block, blocks, documents, outputs, shape, shown_lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "job_results"
LOCAL, IAAS = FIXTURES / "higgs-lr-local.json", FIXTURES / "higgs-lr-iaas-local.json"
#: README's advise command (tour step 5), as the block runs it.
ADVISE = ["advise", "--model", "lr", "--features", "28", "--samples", "11e6", "--algorithm", "admm",
          "--batch-size", "10000", "--epochs", "10", "--workers", "10,20", "--memory", "3008",
          "--instances", "c5.large,c5.xlarge"]  # fmt: skip


def result(path: Path, **change: object) -> JobResult:
    return JobResult.from_json({**json.loads(path.read_text()), "result_path": f"results/tour/{path.stem}.json",
                                **change})  # fmt: skip


def text_of(tables: list[Table]) -> list[str]:
    """Each table's title and header lines as the command's 80-column console prints them."""
    lines = []
    for table in tables:
        console = Console(width=80, file=io.StringIO(), record=True, highlight=False, markup=False, emoji=False)
        console.print(table)
        rendered = [line.rstrip() for line in console.export_text().splitlines()]
        lines += rendered[:2] if table.title else rendered[:1]
    return lines


def printed(capsys: pytest.CaptureFixture[str], *calls: Callable[[], object]) -> str:
    capsys.readouterr()
    for call in calls:
        call()
    return capsys.readouterr().out


# --- what the code prints today, block by block: (printed text, lines every such block shows) ------


def _train(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[str, list[str]]:
    from lambdaml.cli.output import print_result, result_table

    local = result(LOCAL)
    return printed(capsys, lambda: print_result(local)), text_of([result_table(local)])


def _demo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[str, list[str]]:
    from lambdaml.cli.demo import NEXT_STEPS
    from lambdaml.cli.output import print_result

    shown = printed(capsys, lambda: print_result(result(LOCAL, result_path=f"results/{LOCAL.stem}.json")))
    return shown + "\n".join(NEXT_STEPS) + "\n", []  # the demo's block starts after its table


def _use(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[str, list[str]]:
    from lambdaml.cli.model import print_evaluation

    report = {"job_id": result(LOCAL).job_id, "model": "lr", "test": "higgs", "rows": 8000, "accuracy": 0.8925,
              "loss_name": "log loss", "loss": 0.24508, "roc_auc": 0.9579, "classes": [0, 1],
              "confusion": [[4953, 412], [448, 2187]]}  # fmt: skip
    return printed(capsys, lambda: print_evaluation(report)), []


def _compare(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[str, list[str]]:
    from lambdaml.cli.compare import comparison_tables

    paths = [shutil.copy(p, tmp_path / p.name) for p in (LOCAL, IAAS)]
    shown = printed(capsys, lambda: cli.main(["compare", *map(str, paths), "--plot", str(tmp_path / "compare.png")]))
    return shown.replace(str(tmp_path / "compare.png"), "compare.png"), text_of(
        comparison_tables([result(LOCAL), result(IAAS)])
    )


def _stack(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[str, list[str]]:
    from lambdaml.cli.output import print_result

    job_id = result(LOCAL).job_id
    on_lambda = result(LOCAL, backend="lambda", model_uri=f"s3://local-databucket-zsh5htd7p17r/jobs/{job_id}/model")
    return printed(capsys, lambda: print_result(on_lambda)), []


def _advise(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[str, list[str]]:
    from analytic_model import Workload, advise
    from analytic_model.shard_size import binary_dataset_bytes
    from lambdaml.cli.output import advice_table

    workload = Workload("lr", dataset_bytes=binary_dataset_bytes(11_000_000, 28), samples=11_000_000, features=28,
                        algorithm="admm", batch_size=10_000, epochs=10)  # fmt: skip
    advice = advise(workload, workers=[10, 20], memory_mb=[3008], instances=["c5.large", "c5.xlarge"])
    return printed(capsys, lambda: cli.main(ADVISE)), text_of([advice_table(advice, every=False)])


PRINTERS = {
    "demo": _demo,
    "tour-train": _train,
    "tour-use": _use,
    "tour-compare": _compare,
    "tour-stack": _stack,
    "tour-advise": _advise,
}


def code_prints(name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[str, list[str]]:
    return PRINTERS[name](capsys, tmp_path)


def kind(line_shape: str) -> tuple[str, ...]:
    """A line's kind: its shape's first two words (a table's rows share theirs, as do its headers)."""
    return tuple(line_shape.split()[:2])


def problems(block: Block, code: str, headers: list[str]) -> list[str]:
    """What in the block is not what the code prints: a table title or header it lacks, or a line
    of a kind the code prints in another shape."""
    shown = {shape(line) for line in shown_lines(block)}
    missing = [f"missing: {h!r}" for h in headers if shape(h) not in shown]
    shapes = {shape(line) for line in code.splitlines() if line.strip()}
    kinds = {kind(s) for s in shapes}
    wrong = [
        f"not as printed today: {line!r}"
        for line in shown_lines(block)
        if kind(shape(line)) in kinds and shape(line) not in shapes
    ]
    return missing + wrong


def marked() -> list[Block]:
    return [b for path in documents() for b in blocks(path) if b.output]


def test_the_tour_shows_its_outputs() -> None:
    # Guards the test below against markers that went missing.
    assert set(outputs(documents()[0])) >= set(PRINTERS)


@pytest.mark.parametrize("block", marked(), ids=lambda b: f"{b.path.name}:{b.output}")
def test_each_shown_output_is_what_the_code_prints(
    block: Block, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert block.output in PRINTERS, f"{block.where}: no printer for output {block.output!r} in this test"
    code, headers = code_prints(block.output, capsys, tmp_path)
    found = problems(block, code, headers)
    assert not found, f"{block.where} ({block.output}); make docs-outputs rewrites it:\n" + "\n".join(found)


# --- the check catches the formats the README used to show -----------------------------------------

OLD_COMPARE = """runs compared (ratios against local s3 W=4)
┃ run ┃ wall s ┃ s/epoch ┃ load ┃ compute ┃ comm ┃ wait ┃ $ ┃ time x ┃ cost x ┃ loss ┃ acc ┃
│ local s3 W=4 │ 71.3 │ 12.99 │ 1.20 │ 0.19 │ 35.92 │ 26.22 │ 0.031179 │ 1.00 │ 1.00 │ 0.24619 │ 0.8925 │
│ iaas-local gloo W=4 │ 15.9 │ 0.77 │ 0.06 │ 0.09 │ 3.48 │ 0.00 │ 0.005667 │ 0.06 │ 0.18 │ 0.24619 │ 0.8925 │
plot: compare.png
"""
OLD_TRAIN = """job higgs-lr-20261201-122101-2f66: training lr with ga_sgd on 4 workers over s3 (bsp, allreduce)
time per worker (s)
rank  load  compute  communicate  wait  total  requests  MB sent
   0  0.02     0.10        12.21 10.70  23.60      3099     0.12
test accuracy 0.8925 over 2 classes (most common class alone: 0.6707)  test loss 0.24508
"""
OLD_ADVISE_ROWS = """the Pareto front (*) and the fastest of each channel and instance type
   configuration                  time       cost  start  compute   comm
────────────────────────────────────────────────────────────────────────
*  FaaS  20 redis AR 3008MB       2.8s  $0.002807   2.4s    301ms   57ms
   FaaS  20 memcached AR 3008MB   2.8s  $0.002807   2.4s    301ms   57ms
"""


@pytest.mark.parametrize(
    ("name", "old"), [("tour-compare", OLD_COMPARE), ("tour-train", OLD_TRAIN), ("tour-advise", OLD_ADVISE_ROWS)]
)
def test_an_old_format_fails(name: str, old: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, headers = code_prints(name, capsys, tmp_path)
    found = problems(Block(Path("README.md"), "", (), old, 0, len(old), name), code, headers)
    assert found, old
    if name == "tour-compare":  # both tables of today are missing from the one old table
        assert sum(p.startswith("missing: ") for p in found) == 4, found
    if name == "tour-train":
        assert "missing: 'time and traffic per worker'" in found, found


# --- README's claims about the advisor are the advisor's figures -----------------------------------


def test_the_readme_figures_of_the_advisor_are_its_own() -> None:
    from analytic_model import Workload, advise
    from analytic_model.shard_size import binary_dataset_bytes

    text = " ".join(documents()[0].read_text().split())
    claims = text[text.index("The data is sized as workers hold it") : text.index("[docs/cost-model.md]")]

    def cheapest(dataset_bytes: float, platform: str, instances: list[str] | None) -> tuple[str, str]:
        workload = Workload("lr", dataset_bytes=dataset_bytes, samples=11_000_000, features=28, algorithm="admm",
                            batch_size=10_000, epochs=10)  # fmt: skip
        rows = advise(workload, workers=[10, 20], memory_mb=[3008], instances=instances).rows
        best = min((r for r in rows if r.platform == platform and r.workers == 10), key=lambda r: r.cost)
        return f"${best.cost:.4f}", best.option

    shards, text_bytes = binary_dataset_bytes(11_000_000, 28), 8e9
    asked = ["c5.large", "c5.xlarge"]
    for size in (shards, text_bytes):
        faas, _ = cheapest(size, "faas", asked)
        ec2, kind_asked = cheapest(size, "iaas", asked)
        anywhere, kind_anywhere = cheapest(size, "iaas", None)
        assert (kind_asked, kind_anywhere) == ("c5.large", "t3.medium")
        for figure in (faas, ec2, anywhere):
            assert figure in claims, (figure, claims)
    assert "10 c5.large" in claims and "10 t3.medium" in claims


# --- the example job file says how to prepare its data where it reads it ---------------------------


def test_the_example_jobs_prepare_command_writes_where_the_job_reads() -> None:
    import shlex

    from lambdaml.cli.parser import build_parser
    from lambdaml.config import load_job

    path = documents()[0].parent / "lambdaml" / "examples" / "higgs-lr.yaml"
    job = load_job(path)
    line = next(line for line in path.read_text().splitlines() if "data prepare" in line)
    argv = shlex.split(line.lstrip("# "))
    assert argv[0] == ".venv/bin/lambdaml"
    args = build_parser().parse_args(argv[1:])
    assert (args.name, args.endpoint_url, args.bucket) == (job.dataset, job.storage.endpoint_url, job.storage.bucket)
    assert args.shards % job.workers == 0
