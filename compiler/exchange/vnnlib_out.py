"""VNN-LIB 1.0 properties of a test set (`daic export --vnnlib DIR`): the robustness of a network at each
image as the verifiers of VNN-COMP (alpha-beta-CROWN, NNV, Marabou, ...) read it.

A property states where a counterexample would lie: an input in the clipped eps-ball
``[max(x - eps, a), min(x + eps, b)]`` at which some class scores at least the label. The network is robust at
the image exactly when the property is unsatisfiable, which is what `daic verify` certifies: the bounds
are written as the exact values of the float64 ends of the ball daic certifies (the float32 pixel minus
the float64 eps, computed in rationals), so both state the same ball. The inputs ``X_i`` are the image's
values in the network input's row-major order (channels first), before the network's `Normalize`, and
the outputs ``Y_j`` are its logits.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import tempfile
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

from daic.errors import DaicError

WRITTEN = ("instances.csv",)
"""Files of a properties folder besides the properties, which a new export replaces."""


def decimal(value: Fraction) -> str:
    """The exact decimal of a dyadic rational (every float is one): no rounding, no exponent, a point
    always (a real, not an integer, literal)."""
    denominator = value.denominator
    places = denominator.bit_length() - 1
    if denominator != 1 << places:
        raise ValueError(f"{value} has no finite decimal expansion")
    digits = str(abs(value.numerator) * 5**places).rjust(places + 1, "0")
    whole, fraction = digits[: len(digits) - places], digits[len(digits) - places :].rstrip("0")
    return ("-" if value < 0 else "") + whole + "." + (fraction or "0")


def ball(pixels: Sequence[float], epsilon: float, value_range: tuple[float, float]) -> list[tuple[str, str]]:
    """The exact ends ``(lower, upper)`` of the clipped eps-ball of each value, as decimals."""
    eps, low, high = Fraction(epsilon), Fraction(value_range[0]), Fraction(value_range[1])
    return [(decimal(max(Fraction(p) - eps, low)), decimal(min(Fraction(p) + eps, high))) for p in pixels]


def property_text(
    pixels: Sequence[float],
    label: int,
    classes: int,
    epsilon: float,
    value_range: tuple[float, float],
    about: str,
) -> str:
    """One image's property: `about` (comment lines) first, then the declarations, the input box and the
    disjunction of "class j scores at least the label" over the other classes."""
    lines = [f"; {line}" if line else ";" for line in about.splitlines()]
    lines += [f"(declare-const X_{i} Real)" for i in range(len(pixels))]
    lines += [f"(declare-const Y_{j} Real)" for j in range(classes)]
    lines.append("; the clipped eps-ball around the image")
    for i, (lower, upper) in enumerate(ball(pixels, epsilon, value_range)):
        lines += [f"(assert (>= X_{i} {lower}))", f"(assert (<= X_{i} {upper}))"]
    lines.append(f"; a counterexample: another class scores at least the label, {label}")
    lines.append("(assert (or")
    lines += [f"    (and (>= Y_{j} Y_{label}))" for j in range(classes) if j != label]
    lines.append("))")
    return "\n".join(lines) + "\n"


def write_properties(
    folder: Path,
    images: Sequence[Sequence[float]],
    labels: Sequence[int],
    classes: int,
    epsilon: float,
    value_range: tuple[float, float],
    describe: str,
    onnx: Path | None = None,
    timeout: float = 60.0,
) -> list[Path]:
    """Writes `prop_<i>.vnnlib` for each image ``i`` into `folder`, and with `onnx` the benchmark's
    `instances.csv` (network, property, timeout per line, as VNN-COMP lays benchmarks out). `describe`
    says what the images are ("the MNIST test set"). The files are made in a temporary folder beside and
    moved in once all are written; an earlier export's files in `folder` are replaced, anything else there
    is refused, so nothing is left half-written or mixed."""
    check_properties_folder(folder, onnx)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    except OSError as exc:
        raise DaicError(f"cannot write {folder}: {exc.strerror or exc}", exit_code=2) from None
    try:
        names = []
        for i, (pixels, label) in enumerate(zip(images, labels, strict=True)):
            about = (
                f"daic export: image {i} of {describe}, label {label}.\n"
                f"Robust at eps {epsilon!r} (inputs clipped to [{value_range[0]:g}, {value_range[1]:g}]) "
                "exactly when this is unsatisfiable."
            )
            names.append(f"prop_{i}.vnnlib")
            (work / names[-1]).write_text(property_text(pixels, label, classes, epsilon, value_range, about))
        if onnx is not None:
            (work / "instances.csv").write_text(_instances(folder, onnx, names, timeout))
        folder.mkdir(exist_ok=True)
        for old in _previous_export(folder):
            old.unlink()
        for made in sorted(work.iterdir()):
            os.replace(made, folder / made.name)
    except OSError as exc:
        raise DaicError(f"cannot write {folder}: {exc.strerror or exc}", exit_code=2) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [folder / name for name in names]


def _instances(folder: Path, onnx: Path, names: list[str], timeout: float) -> str:
    network = os.path.relpath(onnx.resolve(), folder.resolve())
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for name in names:
        writer.writerow([network, name, f"{timeout:g}"])
    return out.getvalue()


def _previous_export(folder: Path) -> list[Path]:
    return [
        p
        for p in folder.iterdir()
        if p.name in WRITTEN or (p.name.startswith("prop_") and p.suffix == ".vnnlib")
    ]


def check_properties_folder(folder: Path, onnx: Path | None = None) -> None:
    """Refuses a properties folder that holds files an export did not write; the network the same export
    writes into it (`onnx`, and the weights file it names beside it) is the export's own."""
    if folder.exists() and not folder.is_dir():
        raise DaicError(f"--vnnlib {folder} is a file: pass a folder for the properties", exit_code=2)
    if not folder.is_dir():
        return
    ours = set(_previous_export(folder))
    if onnx is not None and onnx.parent.resolve() == folder.resolve():
        ours |= {p for p in folder.iterdir() if p.name == onnx.name or p.name.startswith(onnx.name + ".")}
    others = sorted(p.name for p in folder.iterdir() if p not in ours)
    if others:
        listed = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise DaicError(
            f"--vnnlib {folder} holds files an export did not write ({listed}): pass an empty or new folder",
            exit_code=2,
        )
