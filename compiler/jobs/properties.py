"""`daic verify --vnnlib`: VNN-LIB properties certified as VNN-COMP asks, one answer per property.

The target is a property, a folder of them, or a benchmark's `instances.csv` (network, property, timeout per
line, relative to the file). The network is a `.net` file with a checkpoint, or an ONNX file (imported on
the fly, as `daic import` would). Each case of a property (`vnnlib_in.Region`: an input box with clauses on
the outputs) goes through the cascade (`runtime.specification`); the answer is `unsat` when every case is
verified, `sat` with a witness when a point is found that satisfies the property as written (checked in
exact arithmetic), `timeout` when a complete step ran out of time, and `unknown` otherwise. Each answer is a
line of the record (JSON lines, resumable as `daic verify`'s).
"""

from __future__ import annotations

import copy
import csv
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.compiler.exchange.vnnlib_in import Property, PropertyError, Region, read_property
from daic.errors import DaicError

if TYPE_CHECKING:
    from torch import Tensor

    from daic.compiler.exchange.onnx_nodes import ImportedNetwork
    from daic.compiler.jobs.property_witnesses import Float32Network
    from daic.runtime.training.distributed import Group

ANSWERS = {"verified": "unsat", "falsified": "sat", "unknown": "unknown", "error": "error"}
FEW_INPUTS = 32
"""Networks of at most this many inputs are searched by splitting their input box (InputSplit), others by
splitting ReLUs (BranchAndBound), unless --domain says otherwise."""


CHEAP_CROWN = 10_000
"""Networks of at most this many ReLU neurons get a CROWN step before branch and bound: its pass costs a
fraction of a second there (an MNIST ConvSmall's 3,604: an easy property unsat by CROWN in 1.45 s, where
branch and bound's root and attack took 13.3 s), while on larger ones it costs as much as the search's
root, which bounds by CROWN first anyway (an MNIST CNN7: 21 s of a 20 s limit)."""


def default_domains(certifier: Certifier) -> tuple[str, ...]:
    """The cascade after the attack when --domain is not given: the input box split for a network of few
    inputs, else ReLUs, with a CROWN step first where it is cheap (`CHEAP_CROWN`)."""
    from daic.runtime.certification.verification import relu_neurons

    if math.prod(certifier.input_shape) <= FEW_INPUTS:
        return ("Box", "CROWN", "InputSplit")
    if relu_neurons(certifier.model, certifier.input_shape) <= CHEAP_CROWN:
        return ("Box", "CROWN", "BranchAndBound")
    return ("Box", "BranchAndBound")


@dataclass
class Instance:
    """One property to certify, on the network at `network`, within `timeout` seconds."""

    network: str
    property: Path
    timeout: float


def instances(target: str, net: str | None, timeout: float) -> list[Instance]:
    """The properties `--vnnlib` names: a file, a folder's `*.vnnlib` (in natural order), or the lines of
    an `instances.csv`, whose networks are relative to it (NET must not be given then)."""
    path = Path(target)
    if path.suffix == ".csv":
        if net is not None:
            raise DaicError(f"{target} names the network of each property: omit NET", exit_code=2)
        return _from_csv(path)
    if net is None:
        raise DaicError("pass the network to certify (NET.net with --weights, or NET.onnx)", exit_code=2)
    if path.is_dir():
        found = sorted(path.glob("*.vnnlib"), key=_natural)
        if not found:
            raise DaicError(f"--vnnlib {target}: the folder holds no .vnnlib file", exit_code=2)
        return [Instance(net, p, timeout) for p in found]
    if not path.exists():
        raise DaicError(f"--vnnlib {target} does not exist", exit_code=2)
    return [Instance(net, path, timeout)]


def _natural(path: Path) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def _from_csv(path: Path) -> list[Instance]:
    try:
        rows = [row for row in csv.reader(path.read_text(encoding="utf-8").splitlines()) if row]
    except OSError as exc:
        raise DaicError(f"cannot read {path}: {exc.strerror or exc}", exit_code=2) from None
    found = []
    for number, row in enumerate(rows, 1):
        try:
            seconds = float(row[2]) if len(row) > 2 else math.nan
        except ValueError:
            seconds = math.nan
        if len(row) != 3 or not (math.isfinite(seconds) and seconds > 0):
            expected = "expected `network.onnx,property.vnnlib,timeout` (seconds > 0)"
            raise DaicError(f"{path}:{number}: {expected}", exit_code=2)
        found.append(Instance(str(path.parent / row[0].strip()), path.parent / row[1].strip(), seconds))
    if not found:
        raise DaicError(f"{path} lists no instance", exit_code=2)
    return found


@dataclass
class Certifier:
    """A network ready to certify properties on: the float64 module, its input's shape, its outputs, and
    the network as a witness's checker runs it (`float32`)."""

    model: Any
    input_shape: tuple[int, ...]
    outputs: int
    relu: str
    identity: dict[str, Any]
    float32: Float32Network
    source: ImportedNetwork | None = None  # an ONNX network: its input's shape and order of values

    def in_onnx_order(self, values: list) -> list:
        """Values of the network's flattened input in the order a property's X_i count them (the ONNX
        input's, which an import may regroup: `ImportedNetwork.layout`)."""
        from daic.compiler.exchange.onnx_in import in_onnx_order

        return values if self.source is None else in_onnx_order(self.source, values)

    def in_daic_order(self, values: list) -> list:
        """A property's values of X_0, X_1, ... in the order of the network's flattened input."""
        if self.source is None or self.source.layout is None:
            return values
        return [values[at] for at in self.source.layout.tolist()]


@dataclass
class Networks:
    """The networks of the instances, each loaded once (`weights`: the checkpoint of a `.net` network)."""

    weights: str | None
    device: Any
    loaded: dict[str, Certifier | DaicError] = field(default_factory=dict)

    def get(self, net: str) -> Certifier:
        """The network at `net`, loaded at its first request; one that cannot be loaded raises the same
        `DaicError` at every request."""
        if net not in self.loaded:
            try:
                self.loaded[net] = self._load(net)
            except DaicError as exc:
                self.loaded[net] = exc
        found = self.loaded[net]
        if isinstance(found, DaicError):
            raise found
        return found

    def _load(self, net: str) -> Certifier:
        import torch

        from daic.compiler.jobs.verify import _sha256

        source = None
        if net.endswith(".onnx"):
            if self.weights is not None:
                raise DaicError(f"{net} holds its weights: omit --weights", exit_code=2)
            model, shape, source = _onnx(net)
            relu = "hybrid"
            identity = {"net": str(Path(net).resolve()), "weights_sha256": _sha256(net)}
        elif self.weights is None:
            raise DaicError(f"{net}: pass its weights with --weights (a checkpoint)", exit_code=2)
        else:
            from daic.compiler.jobs.weights import load_without_data

            model, state, network = load_without_data(net, self.weights)
            shape, relu = network.input_shape, state.get("relu", "hybrid")
            identity = {"net": str(Path(net).resolve()), "weights_sha256": _sha256(self.weights)}
        from daic.compiler.jobs.property_witnesses import Float32Network

        checker = Float32Network.of(model, source)
        model = copy.deepcopy(model).to(self.device).double().eval()
        with torch.no_grad():
            outputs = (
                model(torch.zeros(1, *shape, dtype=torch.float64, device=self.device)).flatten(1).shape[1]
            )
        return Certifier(model, tuple(shape), int(outputs), relu, identity, checker, source)


def _onnx(path: str):
    from daic.compiler.exchange.imported import import_onnx
    from daic.compiler.exchange.onnx_nodes import ImportFailure

    try:
        imported = import_onnx(path)
    except ImportFailure as exc:
        raise exc.as_usage() from None
    return imported.model, imported.network.input_shape, imported.source_network


def decide(
    instance: Instance, prop: Property, certifier: Certifier, steps: list, index: int
) -> dict[str, Any]:
    """The answer for one property: its row of the record. `sat` only with a witness `Satisfies` admits;
    `timeout` when a search ran out of time, `unknown` when the cascade ended before (``reason`` says
    why); the margin is a lower bound over the box (the least of its cases'), never a point's value."""
    from daic.compiler.jobs.property_witnesses import Satisfies

    _check_sizes(instance, prop, certifier)
    started = time.perf_counter()
    outcomes = []
    searched: dict[str, Any] = {}  # the last search's effort (`Outcome.search`), for the record
    for region in prop.regions:
        within = _within(steps, started + instance.timeout)
        witnesses = Satisfies(prop, region, certifier)
        outcome = _certify(region, certifier, within, index, witnesses)
        if outcome.status == "unknown" and (empty := _no_float32_point(region)) is not None:
            outcome.message = empty
        searched = {"search": outcome.search} if outcome.search is not None else searched
        if outcome.status == "falsified":
            row = _row(index, instance, "falsified", outcome.by, outcome.margin, started)
            return (
                row
                | searched
                | {"witness": _witness(outcome.witness, certifier), "checked": witnesses.checker}
            )
        outcomes.append(outcome)
    return _undecided_row(index, instance, outcomes, started) | searched


def _undecided_row(index: int, instance: Instance, outcomes: list, started: float) -> dict[str, Any]:
    """The row of a property none of whose cases was falsified: unsat when each was verified."""
    statuses = {outcome.status for outcome in outcomes}
    status = "verified" if statuses == {"verified"} else "error" if "error" in statuses else "unknown"
    by = next((o.by for o in outcomes if o.status == "verified"), None) if status == "verified" else None
    bounds = [o.margin for o in outcomes if o.margin is not None]
    row = _row(index, instance, status, by, min(bounds) if bounds else None, started)
    reasons = list(dict.fromkeys(o.message for o in outcomes if o.status != "verified" and o.message))
    if status == "unknown":
        row["result"] = "timeout" if any(o.timed_out for o in outcomes) else "unknown"
        row["reason"] = "; ".join(reasons) or "no step of the cascade could decide it"
    elif status == "error":
        row["message"] = reasons[0] if reasons else "a step failed"
    return row


def _row(index: int, instance: Instance, status: str, by, margin, started: float) -> dict[str, Any]:
    return {
        "index": index,
        "property": str(instance.property),
        "network": instance.network,
        "status": status,
        "result": ANSWERS[status],
        "domain": by,
        "margin": margin,
        "seconds": round(time.perf_counter() - started, 6),
    }


def _check_sizes(instance: Instance, prop: Property, certifier: Certifier) -> None:
    inputs = math.prod(certifier.input_shape)
    if prop.inputs != inputs or prop.outputs != certifier.outputs:
        raise DaicError(
            f"{instance.property} declares {prop.inputs} inputs and {prop.outputs} outputs; "
            f"{instance.network} has {inputs} and {certifier.outputs}",
            exit_code=2,
        )


def _within(steps: list, deadline: float) -> list:
    """The cascade with its steps ending at the property's `deadline` (`time.perf_counter()`)."""
    cut = [copy.copy(step) for step in steps]
    for step in cut:
        step.until = deadline
    return cut


def _certify(region: Region, certifier: Certifier, steps: list, index: int, witnesses):
    import torch

    from daic.runtime.certification.specification import certify_region

    def box(ends: list[Fraction], direction: int) -> Tensor:
        values = certifier.in_daic_order([_rounded(v, direction) for v in ends])
        # CPU: the property's box, made on the host; `certify_region` moves it to the network's device
        return torch.tensor(values, dtype=torch.float64).reshape(certifier.input_shape)

    outer = (box(region.lower, -1), box(region.upper, 1))
    inner = (box(region.lower, 0), box(region.upper, 0))  # as a checker reads it (`property_witnesses`)
    clauses = [_clause(clause, certifier.outputs) for clause in region.clauses]
    return certify_region(certifier.model, clauses, steps, outer, inner, index, certifier.relu, witnesses)


def _no_float32_point(region: Region) -> str | None:
    """Why no witness can exist in the case's box as read, if none can: an input whose interval holds no
    float32 number (`witness.float32_inside` finds none)."""
    import torch

    from daic.runtime.certification.witness import float32_inside

    # CPU: the case's ends, read on the host
    lower, upper = (
        torch.tensor([[float(v) for v in ends]], dtype=torch.float64) for ends in (region.lower, region.upper)
    )
    near, _ = float32_inside(lower, lower, upper)
    outside = ((near < lower) | (near > upper))[0].nonzero()
    if len(outside) == 0:
        return None
    i = int(outside[0])
    interval = f"[{float(region.lower[i])!r}, {float(region.upper[i])!r}]"
    return (f"X_{i} lies in {interval} (as read), which holds no float32 number: no input a checker can be "
            "given is in the box, so no witness exists")  # fmt: skip


def _rounded(value: Fraction, direction: int) -> float:
    """The float nearest `value` on the side `direction` (-1: at most it, 1: at least it; 0: nearest)."""
    nearest = float(value)
    if direction < 0 and Fraction(nearest) > value:
        return math.nextafter(nearest, -math.inf)
    if direction > 0 and Fraction(nearest) < value:
        return math.nextafter(nearest, math.inf)
    return nearest


def _clause(clause, outputs: int):
    """A clause's rows and constants as tensors: ``rows @ y + constants <= 0``; each constant rounded down,
    so that a bound proving ``rows @ y + constant > 0`` proves it for the constant as written."""
    import torch

    # CPU: the clause's coefficients, read on the host; its layers move with the network they follow
    rows = torch.zeros(len(clause.atoms), outputs, dtype=torch.float64)
    constants = torch.zeros(len(clause.atoms), dtype=torch.float64)
    for r, atom in enumerate(clause.atoms):
        for name, coefficient in atom.coefficients:
            if Fraction(float(coefficient)) != coefficient:
                raise DaicError(
                    f"line {atom.line}: the coefficient {coefficient} of {name} is no binary float: daic "
                    "certifies output constraints with coefficients such as 1, -1 or 0.5",
                    exit_code=2,
                )
            rows[r, int(name[2:])] = float(coefficient)
        constants[r] = _rounded(atom.constant, -1)
    return rows, constants


def _witness(point: Tensor, certifier: Certifier) -> dict[str, list[float]]:
    """The counterexample as VNN-COMP reports it: its inputs (float32 numbers) and the outputs the checker
    computed there."""
    outputs = certifier.float32.run(point.unsqueeze(0))[0]
    return {"X": certifier.in_onnx_order(point.reshape(-1).tolist()), "Y": outputs.tolist()}


def vnncomp_text(row: dict[str, Any]) -> str:
    """The answer as VNN-COMP's result file holds it: the result, and for `sat` the witness."""
    if row["result"] != "sat":
        return row["result"] + "\n"
    values = [f"(X_{i} {v!r})" for i, v in enumerate(row["witness"]["X"])]
    values += [f"(Y_{j} {v!r})" for j, v in enumerate(row["witness"]["Y"])]
    return "sat\n(" + "\n ".join(values) + ")\n"


@dataclass
class PropertySettings:
    net: str | None
    weights: str | None
    target: str
    domains: tuple[str, ...] | None  # None: `default_domains` for the network
    attack: bool
    timeout: float
    out: Path
    resume: bool


def default_out(target: str) -> Path:
    """Where the record goes without `--out`: beside the property, folder or instances.csv."""
    path = Path(target)
    return path.with_name((path.stem if path.is_file() else path.name) + ".verify.jsonl")


def verify_properties(settings: PropertySettings, group: Group, display) -> tuple[dict[str, Any], list]:
    """Certifies the properties (this process's share), and returns the summary of the record and its
    rows. In a folder or an instances file, an instance that cannot be read, imported or decided is that
    instance's `error`; a single property's problem is the command's message."""
    from daic.compiler.jobs.verify import Record

    todo = instances(settings.target, settings.net, settings.timeout)
    networks = Networks(settings.weights, group.device)
    many = Path(settings.target).suffix == ".csv" or Path(settings.target).is_dir()
    if not many:
        networks.get(todo[0].network)  # its problem, if it has one, is the command's
    cascades = Cascades(settings.domains, settings.attack)
    record = Record(settings.out, group)
    identity = _identity(settings, todo, networks, cascades)
    done = group.broadcast(record.open(identity, settings.resume) if group.is_main else None)
    try:
        mine = [i for i in range(len(todo)) if i not in done and i % group.world == group.rank]
        counts, started = Counter(done.values()), time.perf_counter()
        for decided, index in enumerate(mine, 1):
            row = _answer(todo[index], index, networks, cascades, many)
            record.write(row)
            counts[row["status"]] += 1
            display(counts, len(todo), decided / max(1e-9, time.perf_counter() - started))
    finally:
        record.close()
    group.close()
    if group.is_main:
        record.merge()
    rows = record.read()
    return summarize(rows, identity), rows


@dataclass
class Cascades:
    """Each network's cascade: the steps of `domains`, or of `default_domains` for the network."""

    domains: tuple[str, ...] | None
    attack: bool
    made: dict[int, list] = field(default_factory=dict)

    def of(self, certifier: Certifier) -> list:
        from daic.compiler.jobs.verify import cascade_of

        if id(certifier) not in self.made:
            self.made[id(certifier)] = cascade_of(self.domains or default_domains(certifier), self.attack)
        return self.made[id(certifier)]


def _identity(
    settings: PropertySettings, todo: list[Instance], networks: Networks, cascades: Cascades
) -> dict:
    """What the record is of: the properties, the networks' weights (a network that cannot be loaded by
    its path), the first loadable network's cascade, and the count."""
    weights, cascade = set(), None
    for net in dict.fromkeys(i.network for i in todo):
        try:
            certifier = networks.get(net)
        except DaicError:
            weights.add(f"unreadable: {net}")
            continue
        weights.add(certifier.identity["weights_sha256"])
        cascade = cascade or [step.label for step in cascades.of(certifier)]
    return {
        "properties": str(Path(settings.target).resolve()),
        "networks": sorted(weights),
        "cascade": cascade or [],
        "images": len(todo),
    }


def _answer(instance: Instance, index: int, networks: Networks, cascades: Cascades, many: bool) -> dict:
    """The instance's row; where its network or property cannot be used, an `error` row that says why
    (with `many`, else the problem is raised)."""
    started = time.perf_counter()
    try:
        certifier = networks.get(instance.network)
        return decide(instance, _read(instance.property), certifier, cascades.of(certifier), index)
    except DaicError as exc:
        if not many:
            raise
        return _row(index, instance, "error", None, None, started) | {"message": str(exc)}


def _read(path: Path) -> Property:
    try:
        return read_property(path)
    except PropertyError as exc:
        raise exc.as_usage() from None


def summarize(rows: list[dict[str, Any]], identity: dict[str, Any]) -> dict[str, Any]:
    """Counts of each answer, and the seconds per property."""
    results = Counter(row["result"] for row in rows)
    return {
        "properties": identity["images"],
        "recorded": len(rows),
        "cascade": identity["cascade"],
        **{answer: results.get(answer, 0) for answer in ("unsat", "sat", "timeout", "unknown")},
        "errors": results.get("error", 0),
        "seconds_per_property": sum(row["seconds"] for row in rows) / max(1, len(rows)),
    }
