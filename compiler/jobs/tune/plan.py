"""Planning a study: the file checked, the study chosen, its scheme's search spaces named, its folder and
storage found, and what the study is by meaning (which a second worker, or a resumed study, must share)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from daic.compiler.checking.check import check_source
from daic.compiler.checking.elaborate import did_you_mean
from daic.compiler.checking.program import Program, SchemeInfo, StudyInfo
from daic.compiler.checking.sources import language_of, read
from daic.compiler.checking.spaces import Space, named_spaces, spaces_in
from daic.errors import DaicError

DATABASE = "study.db"


@dataclass
class StudyPlan:
    path: Path  # the .dai file that declares the study
    info: StudyInfo
    spaces: list[tuple[str, Space]]  # each parameter's name and space, outermost first
    folder: Path  # the study's folder: its storage (by default), trials and results
    storage: str  # an Optuna storage URL

    @property
    def name(self) -> str:
        return self.info.node.name

    @property
    def scheme(self) -> SchemeInfo:
        assert self.info.scheme is not None  # a checked study has its scheme
        return self.info.scheme

    @property
    def nested(self) -> list[Space]:
        """The spaces inside a Choice's options, drawn only by trials that choose that option."""
        choices = [space for _, space in self.spaces if space.is_choice]
        inner = [s for choice in choices for option in choice.options for s in spaces_in(option)]
        return [space for _, space in self.spaces if any(space is s for s in inner)]

    def definition(self) -> dict[str, str]:
        """The study by meaning: its fields and its scheme's, as checked values."""
        fields = {f"study.{k}": repr(v) for k, v in self.info.built.args.items()}
        fields.update({f"scheme.{k}": repr(v) for k, v in self.scheme.built.args.items() if k != "net"})
        fields["parameters"] = ", ".join(name for name, _ in self.spaces)
        return fields


def plan_study(path: str, name: str | None, out: str | None, storage: str | None) -> StudyPlan:
    """The study `name` of the file (the only one, when `name` is None), checked."""
    if language_of(path) != "dai":
        message = f"{path} is not a .dai file: `daic tune` takes one that declares a study"
        raise DaicError(message, exit_code=2)
    report = check_source(read(path), Program())
    if any(d.is_error for d in report.diagnostics) or report.module is None:
        raise DaicError(f"{path} has errors", list(report.diagnostics))
    studies = report.module.studies
    if not studies:
        raise DaicError(
            f"{path} declares no study: add `study Name tunes Scheme {{ objectives = [...] }}`", exit_code=2
        )
    if name is None and len(studies) > 1:
        raise DaicError(
            f"{path} declares several studies ({', '.join(studies)}): choose one with --study", exit_code=2
        )
    name = name or next(iter(studies))
    if name not in studies:
        hint = did_you_mean(name, list(studies))
        raise DaicError(f"{path} has no study {name!r}" + (f"; {hint}" if hint else ""), exit_code=2)
    info = studies[name]
    folder = Path(out or Path("runs") / name)
    url = storage or f"sqlite:///{os.path.abspath(folder / DATABASE)}"
    return StudyPlan(Path(path), info, named_spaces(info.scheme.built.args), folder, url)
