"""`daic verify`: certify a checkpoint's test set with a cascade, and keep a record of every image.

Each image goes through the cascade (`runtime.certify`): the network on the image itself, an attack (PGD,
unless `--no-attack`), then the domains in the order given, each seeing only the images still undecided.
Every outcome is a line of the record (`--out`, JSON lines: index, label, status, domain, margin, seconds),
appended and flushed as each batch finishes, so that an interrupted run loses at most a batch and
`--resume` carries on with the images not yet decided. A record belongs to one certification: a sidecar
file (`<out>.json`) holds what it certifies (network, checkpoint, data set, eps, cascade, images), and
`--resume` refuses a record of another. With several processes (`--nproc-per-node`, or torchrun), each
takes every world-th image and writes a part of its own, which rank 0 merges into the record at the end.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.errors import DaicError
from daic.files import write_atomic

if TYPE_CHECKING:
    from daic.compiler.jobs.curve import Known
    from daic.runtime.training.distributed import Group

DECIDED = ("verified", "falsified", "unknown")
"""Statuses `--resume` keeps; images that ended in an error are certified again."""


@dataclass
class Settings:
    net: str
    weights: str
    eps: Sequence[str]  # as written: none, the checkpoint's; several (or a range), a curve (see `curve`)
    domains: Sequence[str]
    attack: bool
    dataset: str | None
    data_root: str | None
    download: bool
    limit: int | None
    out: Path
    resume: bool


def default_record(weights: str) -> Path:
    """Where the record goes without `--out`: beside the checkpoint."""
    return Path(weights).with_name(Path(weights).stem + ".verify.jsonl")


@dataclass
class Certification:
    """What `daic verify` certifies, whatever the radius: the cascade, the float64 network, the test set."""

    steps: list
    float64: Any  # the certifying copy of the network (float64, on the group's device)
    state: dict[str, Any]  # the checkpoint
    data: Any  # the loaded data set
    identity: dict[str, Any]  # what a record's sidecar holds, but its epsilon
    relu: str


def prepare(settings: Settings, group: Group) -> Certification:
    """The cascade, the network and the test set, checked and loaded (no record is touched yet)."""
    import copy

    from daic.compiler.jobs.weights import load_trained
    from daic.compiler.lower import lower_dataset

    steps = cascade_of(settings.domains, settings.attack)
    model, state, data_set, _network = load_trained(settings.net, settings.weights, settings.dataset)
    data = lower_dataset(data_set).load(settings.data_root, settings.download)
    identity = {
        "net": str(Path(settings.net).resolve()),
        "weights_sha256": _sha256(settings.weights),
        # Its name, or where its arguments describe it (ImageFolder's folder), the whole application.
        "dataset": data_set.decl.name if data_set.decl.dataset.from_args is None else repr(data_set),
        "cascade": [step.label for step in steps],
        "images": min(settings.limit or len(data.test_y), len(data.test_y)),
    }
    float64 = copy.deepcopy(model).to(group.device).double()
    return Certification(steps, float64, state, data, identity, state.get("relu", "hybrid"))


def cascade_of(domains: Sequence[str], attack: bool) -> list:
    """The cascade's steps for the domains as the language writes them (`--domain`), each once, in order;
    an attack when asked for (or when a step is complete), after the cheap ones (Box)."""
    from daic.compiler.checking.expressions import ExpressionError, check_expression
    from daic.compiler.lower import lower_value
    from daic.compiler.types import DOMAIN
    from daic.runtime.certification.certify import cascade

    try:
        methods = [lower_value(check_expression(d, DOMAIN)) for d in dict.fromkeys(domains)]
    except ExpressionError as exc:
        raise DaicError(f"--domain: {exc}", exit_code=2) from None
    return cascade(methods, attack=attack)


def certify_radius(
    certification: Certification,
    epsilon: float,
    out: Path,
    resume: bool,
    group: Group,
    display: Callable[[Counter, int, float], None],
    known: Known | None = None,
) -> dict[str, Any]:
    """Certifies the images at `epsilon` into the record `out`; `known` (a curve's other radii) decides
    what it can without the cascade, or with only its cheaper steps."""
    n = certification.identity["images"]
    identity = {**certification.identity, "epsilon": epsilon}
    record = Record(out, group)
    done = group.broadcast(record.open(identity, resume) if group.is_main else None)
    todo = [i for i in range(n) if i not in done and i % group.world == group.rank]
    sink = _Sink(record, Counter(done.values()), n, display)

    def run(steps, images: list[int], on_outcome=None) -> None:
        _run(certification, epsilon, steps, images, on_outcome or (lambda o: sink.write(o.record())))

    try:
        if known is not None:
            todo = known.settle(epsilon, todo, certification.steps, run, sink.write)
        if todo:
            run(certification.steps, todo)
    finally:
        record.close()
    group.close()  # every process has written its part
    if group.is_main:
        record.merge()
    return summarize(record.read(), identity)


class _Sink:
    """Where a radius's outcomes go: its record, and the display's counts."""

    def __init__(self, record: Record, counts: Counter, images: int, display) -> None:
        self.record, self.counts, self.images, self.display = record, counts, images, display
        self.before, self.started = sum(counts.values()), time.perf_counter()

    def write(self, row: dict[str, Any]) -> None:
        self.record.write(row)
        self.counts[row["status"]] += 1
        rate = (sum(self.counts.values()) - self.before) / max(1e-9, time.perf_counter() - self.started)
        self.display(self.counts, self.images, rate)


def _run(certification: Certification, epsilon: float, steps, images: list[int], on_outcome) -> None:
    """The cascade `steps` on the test images `images` at `epsilon`, each outcome to `on_outcome`."""
    import torch

    from daic.runtime.certification.certify import certify

    data = certification.data
    # CPU: the test set is held on the host; these pick the images to certify from it
    index = torch.tensor(images, dtype=torch.long)
    certify(certification.float64, steps, data.test_x[index], data.test_y[index], epsilon, data.value_range,
            indices=images, relu=certification.relu, on_outcome=on_outcome)  # fmt: skip


class Record:
    """The JSON-lines record of a certification, its sidecar, and this process's part of it."""

    def __init__(self, path: Path, group: Group) -> None:
        self.path, self.group = path, group
        self.sidecar = path.with_name(path.name + ".json")
        self.part = path if not group.active else path.with_name(f"{path.name}.part{group.rank}")
        self.handle = None

    def open(self, identity: dict[str, Any], resume: bool) -> dict[int, str]:
        """Checks the record is this certification's (or starts one) and returns the images it decided."""
        # A record with no image in it (a certification that failed before its first) holds nothing to keep.
        if not resume and (self.path.exists() or self.sidecar.exists()) and self.read():
            raise DaicError(
                f"{self.path} already holds a record: pass --resume to continue it, or choose another --out",
                exit_code=2,
            )
        if resume and self.sidecar.exists():
            previous = json.loads(self.sidecar.read_text())
            changed = [k for k, v in identity.items() if previous.get(k) != v]
            if changed:
                raise DaicError(
                    f"{self.path} records another certification ({', '.join(changed)} differ): resume with "
                    "the same settings, or choose another --out",
                    exit_code=2,
                )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _write_text(self.sidecar, json.dumps(identity, indent=2) + "\n")
        except OSError as exc:
            raise DaicError(f"cannot write {self.sidecar}: {exc.strerror or exc}", exit_code=2) from None
        self.merge()  # parts a killed run of several processes left behind
        return {row["index"]: row["status"] for row in self.read() if row["status"] in DECIDED}

    def write(self, row: dict[str, Any]) -> None:
        """One image's outcome (`Outcome.record()`), appended and flushed."""
        if self.handle is None:
            self.handle = open(self.part, "a", encoding="utf-8")  # noqa: SIM115 - kept open across batches
        self.handle.write(json.dumps(row) + "\n")
        self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def read(self) -> list[dict[str, Any]]:
        """The record's rows, the last of each image (a row cut short by a kill is no row)."""
        return Record.rows_of(self.path)

    @staticmethod
    def rows_of(path: Path) -> list[dict[str, Any]]:
        """The rows of the record at `path` and of its processes' parts, the last of each image."""
        rows: dict[int, dict[str, Any]] = {}
        for part in [path, *sorted(path.parent.glob(path.name + ".part*"))]:
            if not part.exists():
                continue
            for line in part.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("index"), int):
                    rows[row["index"]] = row
        return [rows[i] for i in sorted(rows)]

    def merge(self) -> None:
        """The record and every part in one file, sorted by image, written atomically; the parts removed."""
        parts = sorted(self.path.parent.glob(self.path.name + ".part*"))
        rows = self.read()
        if not parts and self.path.exists() and self._lines() == [json.dumps(row) for row in rows]:
            return  # one file already, in order (a curve's carried verdicts are written out of order)
        if rows or parts:
            _write_text(self.path, "".join(json.dumps(row) + "\n" for row in rows))
        for part in parts:
            part.unlink(missing_ok=True)

    def _lines(self) -> list[str]:
        return [line for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


def summarize(rows: list[dict[str, Any]], identity: dict[str, Any]) -> dict[str, Any]:
    """Counts of each status (and of each domain's verifications and falsifications), shares of the images,
    the accuracy (misclassified images are falsified by themselves, ``clean``), the accuracy under the
    cascade's attack where it has one, seconds."""
    from daic.runtime.certification.certify import CLEAN, Attack

    n = identity["images"]
    statuses = Counter(row["status"] for row in rows)
    by_domain = Counter(row["domain"] for row in rows if row["status"] == "verified")
    falsified_by = Counter(row["domain"] for row in rows if row["status"] == "falsified")
    # Images the network does not classify: misclassified, or its output there is not a number.
    unclassified = falsified_by[CLEAN] + sum(
        row["status"] == "error" and row["domain"] == CLEAN for row in rows
    )
    seconds = sum(row["seconds"] for row in rows)
    summary = {
        "images": n,
        "recorded": len(rows),
        "epsilon": identity["epsilon"],
        "cascade": identity["cascade"],
        **{status: statuses.get(status, 0) for status in ("verified", "falsified", "unknown", "error")},
        "verified_by": dict(by_domain),
        "falsified_by": dict(falsified_by),
        "verified_percent": 100.0 * statuses.get("verified", 0) / max(1, n),
        "accuracy_percent": 100.0 * (n - unclassified) / max(1, n),
        "seconds_per_image": seconds / max(1, len(rows)),
    }
    if Attack.label in identity["cascade"]:
        attacked = unclassified + falsified_by[Attack.label]
        summary["attack_accuracy_percent"] = 100.0 * (n - attacked) / max(1, n)
    return summary


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_text(path: Path, text: str) -> None:
    write_atomic(path, lambda handle: handle.write(text.encode("utf-8")))
