"""The `daic` command line. Exit codes: 0 clean, 1 problems found, 2 usage errors.

Commands that only read sources (check, fmt, explain) never import torch; commands that run networks
import the runtime inside their own function.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from daic.compiler.checking.elaborate import did_you_mean
from daic.compiler.checking.sources import UsageError
from daic.compiler.commands import render
from daic.compiler.commands.threads import share_out, use_threads
from daic.dsl import diagnostics as D
from daic.errors import DaicError

if TYPE_CHECKING:  # commands that only read sources never import torch
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from daic.runtime.training.distributed import Group


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from daic.compiler.jobs.about import version_text

    click.echo(version_text())
    ctx.exit()


class _Commands(click.Group):
    """daic's commands. A `DaicError` that a command does not handle itself is reported here, in one
    place: the sources' diagnostics, then the message, and the error's exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except DaicError as exc:
            _report(exc)
            sys.exit(exc.exit_code)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the versions of daic, Python, torch and CUDA, daic's git commit and the host, and exit.",
)
def main() -> None:
    """daic: certified training of neural networks from .net and .dai sources."""


STDIN_FILENAME = click.option(
    "--stdin-filename",
    metavar="PATH",
    help="The name of the source read from `-`: its suffix gives the language, its folder the place of "
    "relative imports and nets. Without it the language is read off the text.",
)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(list(render.RENDERERS)),
    default="text",
    show_default=True,
    help="text: each diagnostic with its source line; concise: one line (and a hint) each; json: a list; "
    "sarif: SARIF 2.1.0 (code scanning); github: GitHub Actions annotations.",
)
@STDIN_FILENAME
@click.option("--strict", is_flag=True, help="Warnings fail the check too (exit 1).")
@click.option(
    "--select", "select", multiple=True, metavar="CODES",
    help="Report only these codes or code prefixes (comma-separated, e.g. E1,W202); repeatable.",
)  # fmt: skip
@click.option("--ignore", "ignore", multiple=True, metavar="CODES", help="Leave these codes or prefixes out.")
def check(
    paths: tuple[str, ...], output_format: str, stdin_filename: str | None, strict: bool,
    select: tuple[str, ...], ignore: tuple[str, ...],
) -> None:  # fmt: skip
    """Parse and check .net and .dai files (or folders of them, or `-` for standard input) and report
    every problem."""
    from daic.compiler.commands.check import Selection, check_command, codes

    selection = Selection(codes(select, "--select"), codes(ignore, "--ignore"), strict)
    sys.exit(check_command(paths, output_format, stdin_filename, selection))


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--check", "check_only", is_flag=True, help="Change nothing; exit 1 if a file is not formatted."
)
@click.option("--diff", is_flag=True, help="Change nothing; print what formatting would change.")
@STDIN_FILENAME
def fmt(paths: tuple[str, ...], check_only: bool, diff: bool, stdin_filename: str | None) -> None:
    """Rewrite .net and .dai files in their canonical form (`-`: standard input to standard output)."""
    from daic.compiler.commands.fmt import fmt_command

    sys.exit(fmt_command(paths, check_only, diff, stdin_filename))


@main.command(name="import")
@click.argument("model", metavar="MODEL.onnx", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="The .net file to write (default: MODEL.net beside the model); the weights go beside it, NAME.pt.",
)
@click.option("--force", is_flag=True, help="Replace the .net file and checkpoint if they exist.")
def import_(model: str, out: str | None, force: bool) -> None:
    """Read an ONNX network as a .net file of daic's language and a checkpoint of its weights."""
    from daic.api import write_import

    net = Path(out) if out else Path(model).with_suffix(".net")
    imported, weights, difference = write_import(model, net, force)
    layers = sum(1 for line in imported.text.splitlines() if line.strip() and not line.startswith("#"))
    matched = f"; onnxruntime matches it within {difference:.2g}" if difference >= 0 else ""
    click.echo(f"wrote {net} ({layers} lines) and its weights, {weights}{matched}")


@main.command()
@click.argument("folder", default=".")
def init(folder: str) -> None:
    """Write a starter network (model.net) and training scheme (train.dai) into FOLDER (default: here)."""
    from daic import api
    from daic.compiler.jobs.starter import SCHEME

    for path in api.init(folder):
        click.echo(f"wrote {path}")
    click.echo(f"next: daic check {folder}, then daic run {Path(folder) / SCHEME}", err=True)


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a shape like 3,32,32") from None
    if len(shape) not in (1, 3) or min(shape) < 1:
        raise click.BadParameter(f"{text!r} is not a shape like 3,32,32 (C,H,W) or 100")
    return shape


@main.command()
@click.argument("net", type=click.Path(dir_okay=False))
@click.option(
    "--input", "input_shape", metavar="C,H,W", help="The input shape, if the file has no annotation."
)
@click.option(
    "--classes", type=click.IntRange(min=1), help="Check that the network ends with this many outputs."
)
def show(net: str, input_shape: str | None, classes: int | None) -> None:
    """Print a network's layers with their output shapes, neurons and parameters."""
    from rich.console import Console

    from daic import api
    from daic.compiler.commands.show import network_table

    network = api.describe_network(net, _parse_shape(input_shape) if input_shape else None, classes)
    if network.input_shape is not None:  # without it, every row would be `?`
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
        console.print(network_table(network, net))
    index = _index_of(replace(network.diagnostics[0], path=net)) if network.diagnostics else None
    for d in network.diagnostics:
        click.echo(render.as_text(replace(d, path=net), index), err=True)
    if network.input_shape is None:
        raise UsageError(f"{net}: no input shape: give --input C,H,W or an input_shape annotation")
    sys.exit(1 if any(d.is_error for d in network.diagnostics) else 0)


THREADS = click.option(
    "--threads",
    type=click.IntRange(min=1),
    help="CPU threads for PyTorch (default: OMP_NUM_THREADS if set, else one per core the last minute's "
    "load leaves free).",
)


@main.command()
@click.argument("scheme_file", metavar="SCHEME.dai", type=click.Path(dir_okay=False))
@click.option(
    "--net", "net", type=click.Path(dir_okay=False), help="The network (overrides the scheme's `net`)."
)
@click.option("--scheme", "scheme_name", help="Which scheme of the file, when it has several.")
@click.option("--data", "data_root", type=click.Path(file_okay=False), help="Folder of the data set's files.")
@click.option("--download", is_flag=True, help="Fetch the data set into --data if it is not there.")
@click.option("--epochs", type=click.IntRange(min=1), help="Train this many epochs instead of the scheme's.")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    metavar="N",
    help="Seed every random stream with N (not the scheme's).",
)
@click.option(
    "--device", default="auto", show_default=True, help="cpu, cuda, cuda:N, or auto (CUDA when present)."
)
@click.option("--out", type=click.Path(file_okay=False), help="Run folder (default: runs/SCHEME).")
@click.option("--resume", is_flag=True, help="Continue the run in --out from its last checkpoint.")
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    help="Train with N processes on this machine (DistributedDataParallel through torchrun; one GPU each "
    "with --device cuda). The scheme's batch is split among them.",
)
@click.option(
    "--amp",
    type=click.Choice(["bf16", "fp16"]),
    is_flag=False,
    flag_value="bf16",
    help="Mixed precision for the concrete passes (bf16 when given alone); abstract ones stay float32.",
)
@THREADS
@click.pass_context
def run(
    ctx: click.Context,
    scheme_file: str,
    net: str | None,
    scheme_name: str | None,
    data_root: str | None,
    download: bool,
    epochs: int | None,
    seed: int | None,
    device: str,
    out: str | None,
    resume: bool,
    nproc_per_node: int | None,
    amp: str | None,
    threads: int | None,
) -> None:
    """Train, attack and certify a network with a training scheme."""
    use_threads(threads)  # before PyTorch starts
    from daic.compiler.jobs.run import summary_text

    if nproc_per_node and nproc_per_node > 1:
        checked = partial(_check_run, scheme_file, scheme_name, net, nproc_per_node)
        _launch_workers(ctx, nproc_per_node, "run", checked, device)
    group = _join_group(device)
    try:
        summary, folder = _train(
            group, scheme_file, scheme_name, net, out, epochs=epochs, data=data_root,
            download=download, resume=resume, amp=amp, seed=seed,
        )  # fmt: skip
    except DaicError as exc:
        _stop_run(group, exc)
    group.close()
    if group.is_main:
        click.echo(summary_text(summary))
        click.echo(f"run folder: {folder}", err=True)
    _leave(group, 0)


def _stop_run(group: Group, exc: DaicError) -> None:
    """A run ended by an error: rank 0 reports it, and every process leaves with its exit code."""
    code = exc.exit_code
    if group.is_main:
        _report(exc)
    # Every process meets the same error at the same point (it comes from the sources, the options or
    # rank 0's verdict, which `execute` shares), and rank 0 alone reports it; the others wait for it, so
    # that torchrun, which stops every process once one has ended, does not cut the report short.
    # An interrupt may catch the processes anywhere, so then nobody waits.
    group.close(wait=code != 130)
    _leave(group, code)


def _train(
    group: Group, scheme_file: str, scheme_name: str | None, net: str | None, out: str | None, **options
):
    """The run planned and executed in this process of `group` through the Python API: its summary and
    folder. An interrupt before training and an exhausted device become the DaicErrors that say what to
    do."""
    from daic import api
    from daic.compiler.commands.run_display import RunDisplay
    from daic.compiler.jobs.run.display import Silent

    try:
        plan = api.load_scheme(scheme_file, scheme_name, net)
        if group.is_main:
            _warn_short_epochs(plan, options["epochs"])
        folder = Path(out or Path("runs") / plan.scheme.node.name)
        display = RunDisplay(processes=group.world) if group.is_main else Silent()
        summary = api.train(plan, folder, device=str(group.device), display=display, group=group, **options)
        return summary, folder
    except KeyboardInterrupt:  # the training loop reports its own; this is before it began
        raise api.DaicError(
            "interrupted before training began: run the same command again", exit_code=130
        ) from None
    except RuntimeError as exc:
        if not _out_of_memory(exc):
            raise
        raise api.DaicError(
            f"out of memory on {group.device} ({str(exc).splitlines()[0][:200]}): use a smaller batch "
            "or network, or split the batch over processes with --nproc-per-node",
        ) from None


def _warn_short_epochs(plan, epochs: int | None) -> None:
    """--epochs that end before the scheme's schedules settle train on their values midway: say so."""
    from daic.compiler.checking.schedules import described, unsettled

    late = unsettled(plan.scheme.built.args, epochs)
    if late:
        click.echo(
            f"daic: warning: --epochs {epochs} ends before the scheme's schedules settle "
            f"({described(late)}): the run never trains on their final values",
            err=True,
        )


def _leave(group: Group, code: int) -> None:
    """Ends a run with `code`. A process of several skips Python's interpreter teardown (`os._exit`, after
    flushing its output): gloo's threads may still hold tensors then, and freeing those while the
    interpreter is being torn down now and then aborts a process whose work is all done (pytorch#179291)."""
    if group.active:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        sys.exit(code)


def _out_of_memory(exc: RuntimeError) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)


def _report(exc: DaicError) -> None:
    """An error on stderr as the command line says it (`command_message`), after its diagnostics."""
    for d in exc.diagnostics:
        click.echo(render.as_text(d, _index_of(d)), err=True)
    click.echo(f"daic: {exc.command_message}", err=True)


def _join_group(device: str) -> Group:
    """This process's group: the one torchrun describes in the environment, or a group of one."""
    from daic.runtime.training.distributed import DistributedError, Group, join, launched_world

    if launched_world() == 1:
        import torch

        return Group(device=torch.device(_device(device)))
    try:
        return join(device)
    except DistributedError as exc:
        raise UsageError(str(exc)) from None


def _launch_workers(
    ctx: click.Context, nproc: int, command: str, check: Callable[[], None], device: str
) -> NoReturn:
    """`daic run/verify --nproc-per-node N ...`: check what can be checked once (`check`), then start N
    copies of this command (less the option) under torchrun's agent on this machine, and exit with their
    status."""
    import torch
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    from daic.runtime.training.distributed import DistributedError, launched_world, process_device

    if launched_world() > 1:
        raise UsageError("--nproc-per-node: this process was already started by torchrun")
    try:
        # Source errors are reported here, once, rather than by every worker.
        check()
        process_device(device, nproc - 1, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    except DistributedError as exc:
        raise UsageError(str(exc)) from None
    # torchrun would give every CPU process one thread; share the cores out instead.
    share_out(nproc)
    args = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={nproc}", "--module", "daic", command, *_worker_arguments(ctx)]
    )
    try:
        torchrun(args)
    except ChildFailedError as exc:
        sys.exit(_exit_status(exc))
    except SignalException as exc:
        # Ctrl-C or SIGTERM: torchrun passed it to the workers, whose rank 0 has said what was saved.
        sys.exit(128 + int(exc.sigval))
    sys.exit(0)


def _check_run(scheme_file: str, scheme_name: str | None, net: str | None, nproc: int) -> None:
    from daic.compiler.jobs.run import plan_run
    from daic.compiler.lower import lower_value
    from daic.runtime.training.distributed import local_batch

    local_batch(lower_value(plan_run(scheme_file, scheme_name, net).scheme.built).batch, nproc)


def _worker_arguments(ctx: click.Context) -> list[str]:
    """This `daic run` (or `verify`) command line, rebuilt from its parsed parameters, without
    --nproc-per-node."""
    arguments: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        # A default is left for the worker to take: what was given is what each mode checks (--timeout).
        unset = ctx.get_parameter_source(param.name) is click.core.ParameterSource.DEFAULT
        if param.name == "nproc_per_node" or value is None or unset:
            continue
        if isinstance(param, click.Argument):
            arguments.append(str(value))
        elif isinstance(param, click.Option) and param.is_flag:
            if value:
                arguments.append(param.opts[0])
            elif param.secondary_opts:  # --attack/--no-attack
                arguments.append(param.secondary_opts[0])
        elif isinstance(param, click.Option) and param.multiple:
            for item in value:
                arguments += [param.opts[0], str(item)]
        else:
            arguments += [param.opts[0], str(value)]
    return arguments


def _exit_status(failed: ChildFailedError) -> int:
    """The workers' exit status: the status a worker chose (rank 0's first: it reported why), rather than
    that of one torchrun stopped with a signal because another had ended."""
    chosen = {rank: f for rank, f in failed.failures.items() if f.exitcode > 0}
    failure = chosen.get(0) or min(chosen.values(), key=lambda f: f.timestamp, default=None)
    code = (failure or failed.get_first_failure()[1]).exitcode
    return 128 - code if code < 0 else code  # killed by signal s: -s, reported as 128 + s by shells


@main.command()
@click.argument("study_file", metavar="STUDY.dai", type=click.Path(dir_okay=False))
@click.option("--study", "study_name", help="Which study of the file, when it declares several.")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="The study's folder (default: runs/STUDY): trials, results.",
)
@click.option(
    "--storage",
    metavar="URL",
    help="An Optuna storage URL (default: sqlite:///OUT/study.db). Workers on several machines share one "
    "study through one database: postgresql://user:password@host/name.",
)
@click.option("--data", "data_root", type=click.Path(file_okay=False), help="Folder of the data set's files.")
@click.option(
    "--device", default="auto", show_default=True, help="cpu, cuda, cuda:N, or auto (CUDA when present)."
)
@click.option("--dashboard", is_flag=True, help="Also start optuna-dashboard on the storage (if installed).")
@THREADS
def tune(
    study_file: str,
    study_name: str | None,
    out: str | None,
    storage: str | None,
    data_root: str | None,
    device: str,
    dashboard: bool,
    threads: int | None,
) -> None:
    """Run a study: trials of a scheme whose search spaces take the values a sampler chooses, until the study
    has its results; then the best trial (or Pareto front), tested on the test set, and best.dai. Run the
    same command again to continue a study that was stopped, or on other machines with one --storage."""
    use_threads(threads)  # before PyTorch starts
    from daic import api
    from daic.compiler.commands.run_display import RunDisplay
    from daic.compiler.jobs.tune import report_text

    device = _device(device)
    try:
        plan = api.load_study(study_file, study_name, out, storage)
        if dashboard:
            _start_dashboard(plan.storage)
        report = api.tune(
            plan,
            data=data_root,
            device=device,
            on_trial=lambda trial, progress: click.echo(f"{_trial_line(trial)}\n{progress}", err=True),
            display=lambda number: RunDisplay(),
        )
    except DaicError as exc:
        _report(_as_study_error(exc))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("daic: interrupted; run the same command to continue the study", err=True)
        sys.exit(130)
    click.echo(report_text(plan, report))
    click.echo(f"study folder: {plan.folder} ({', '.join(report.files)})", err=True)


def _as_study_error(exc: DaicError) -> DaicError:
    """A trial's interrupt said how to resume its run; a study continues by the same command instead."""
    if exc.exit_code != 130:
        return exc
    return DaicError(
        "interrupted: the trial in progress is marked cut short and not counted; run the same command to "
        "continue the study",
        exit_code=130,
    )


def _trial_line(trial) -> str:
    params = ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial.params.items()
    )
    values = ", ".join(f"{v:.2f}" for v in trial.values or ())
    state = {"COMPLETE": "complete", "PRUNED": "pruned"}.get(trial.state.name, trial.state.name.lower())
    return f"trial {trial.number} {state}: {params}" + (f" -> {values}" if values else "")


def _start_dashboard(storage: str) -> None:
    import shutil
    import subprocess

    program = shutil.which("optuna-dashboard")
    if program is None:
        raise UsageError("--dashboard: optuna-dashboard is not installed (pip install optuna-dashboard)")
    subprocess.Popen([program, storage], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    click.echo("optuna-dashboard: http://127.0.0.1:8080", err=True)


@main.command()
@click.argument("net", metavar="NET", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--weights",
    type=click.Path(dir_okay=False),
    help="A checkpoint of `daic run` or `daic import` (for NET.net; an ONNX network holds its own).",
)
@click.option(
    "--vnnlib",
    type=click.Path(),
    help="Certify VNN-LIB properties instead of a test set: a .vnnlib file, a folder of them, or a "
    "benchmark's instances.csv (which names each property's network: omit NET). Answers unsat, sat (with a "
    "witness), timeout or unknown, as VNN-COMP does.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="With --vnnlib: seconds per property (an instances.csv gives its own).",
)
@click.option(
    "--eps",
    multiple=True,
    metavar="EPS",
    help="Radius (default: the run's epsilon). Given several times, or as START:STOP:COUNT, a curve: each "
    "radius certified in a record of its own, and accuracy, PGD accuracy and certified accuracy against "
    "epsilon printed and drawn (NAME.curve.png beside the record).",
)
@click.option(
    "--domain",
    "domains",
    multiple=True,
    default=("Box", "HBox", "CROWN"),
    show_default=True,
    help="The cascade, in order: each image goes to the next domain while the earlier ones leave it "
    "undecided. A domain as in a scheme's Verify(...): Box, HBox, CROWN, AlphaCROWN(steps=50), "
    "BranchAndBound(timeout=60), ... (`daic doc BranchAndBound`). With --vnnlib: Box, CROWN and "
    "InputSplit for a network of at most 32 inputs, else Box and BranchAndBound, within --timeout.",
)
@click.option(
    "--attack/--no-attack",
    default=True,
    show_default=True,
    help="PGD, to falsify images cheaply: after Box, before the costlier domains.",
)
@click.option("--dataset", help="The data set (default: the one the checkpoint was trained on).")
@click.option("--data", "data_root", type=click.Path(file_okay=False), help="Folder of the data set's files.")
@click.option("--download", is_flag=True, help="Fetch the data set into --data if it is not there.")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N test images.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="The record, one JSON line per image (default: beside the checkpoint, NAME.verify.jsonl).",
)
@click.option("--resume", is_flag=True, help="Continue the record in --out with the images it lacks.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: a table; json: the summary as one JSON object.",
)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    help="Certify with N processes on this machine (torchrun; one GPU each with --device cuda), each a "
    "share of the images.",
)
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N, or auto.")
@THREADS
@click.pass_context
def verify(ctx: click.Context, **options) -> None:
    """Certify a trained network's test set image by image and keep a record of each."""
    use_threads(options["threads"])  # before PyTorch starts
    from daic import api
    from daic.compiler.commands.verify_output import VerifyDisplay, print_result
    from daic.compiler.jobs.verify import default_record

    _check_verify_options(ctx, options)
    nproc = options["nproc_per_node"]
    if nproc and nproc > 1:
        _launch_workers(ctx, nproc, "verify", lambda: None, options["device"])
    group = _join_group(options["device"])
    if options["vnnlib"] is not None:
        _verify_properties(ctx, options, group)
        return
    out = Path(options["out"] or default_record(options["weights"]))
    names = ("eps", "domains", "attack", "dataset", "download", "limit", "resume")
    display = VerifyDisplay(enabled=group.is_main)
    try:
        result = api.verify(
            options["net"], options["weights"], **{name: options[name] for name in names},
            data=options["data_root"], out=out, display=display.update, group=group,
        )  # fmt: skip
    except KeyboardInterrupt:
        display.close()
        kept = f"what was certified is in {out}" if out.exists() else "no image was decided yet"
        click.echo(f"daic: interrupted; {kept}: continue with --resume", err=True)
        _leave(group, 130)
    except DaicError as exc:
        display.close()
        if group.is_main:
            _report(exc)
        _leave(group, exc.exit_code)
    display.close()
    if group.is_main:
        print_result(result, options["net"], out, options["output_format"])
    _leave(group, 0)


def _check_verify_options(ctx: click.Context, options: dict) -> None:
    """A test set's options and a property's do not mix; each mode has what it needs."""
    if options["vnnlib"] is not None:
        names = ("eps", "dataset", "data_root", "download", "limit")
        typed = click.core.ParameterSource.COMMANDLINE
        given = [f"--{name.replace('_', '-')}" for name in names if ctx.get_parameter_source(name) is typed]
        if given:
            raise UsageError(
                f"{', '.join(given)}: a property states its own inputs; omit these with --vnnlib"
            )
        return
    if options["net"] is None or options["weights"] is None:
        raise UsageError("pass NET.net and --weights CHECKPOINT (or --vnnlib PROPERTIES)")
    if ctx.get_parameter_source("timeout") is click.core.ParameterSource.COMMANDLINE:
        raise UsageError(
            "--timeout is the time per property of --vnnlib: for a test set, give BranchAndBound(timeout=S)"
        )


def _verify_properties(ctx: click.Context, options: dict, group: Group) -> None:
    """`daic verify --vnnlib`: one property's answer on stdout as VNN-COMP writes it, or a table of all."""
    from daic import api
    from daic.compiler.commands.verify_output import VerifyDisplay, print_properties
    from daic.compiler.jobs.properties import default_out

    domains = tuple(options["domains"])
    if ctx.get_parameter_source("domains") is not click.core.ParameterSource.COMMANDLINE:
        domains = None  # chosen for the network: its input box split if it has few inputs
    out = Path(options["out"] or default_out(options["vnnlib"]))
    display = VerifyDisplay(enabled=group.is_main, unit="properties")
    try:
        summary, rows = api.verify_properties(
            options["vnnlib"], options["net"], weights=options["weights"], domains=domains,
            attack=options["attack"], timeout=options["timeout"], out=out, resume=options["resume"],
            display=display.update, group=group,
        )  # fmt: skip
    except KeyboardInterrupt:
        display.close()
        click.echo(f"daic: interrupted; what was decided is in {out}: continue with --resume", err=True)
        _leave(group, 130)
    except DaicError as exc:
        display.close()
        if group.is_main:
            _report(exc)
        _leave(group, exc.exit_code)
    display.close()
    if group.is_main:
        print_properties(summary, rows, out, options["output_format"])
        if summary["errors"]:
            click.echo(f"daic: {summary['errors']} of the instances could not be decided: see `message` "
                       f"in {out}", err=True)  # fmt: skip
    _leave(group, 1 if summary["errors"] else 0)


@main.command()
@click.argument("net", metavar="NET.net", type=click.Path(dir_okay=False))
@click.option("--weights", required=True, type=click.Path(dir_okay=False), help="A checkpoint of `daic run`.")
@click.option("--onnx", "onnx_path", type=click.Path(dir_okay=False), help="The ONNX file to write.")
@click.option(
    "--vnnlib",
    "vnnlib_dir",
    type=click.Path(),
    help="A folder for one VNN-LIB property per test image (with --onnx, also instances.csv).",
)
@click.option(
    "--eps", type=float, help="Radius (default: the run's epsilon); checked as `daic verify` checks it."
)
@click.option("--dataset", help="The data set (default: the one the checkpoint was trained on).")
@click.option("--data", "data_root", type=click.Path(file_okay=False), help="Folder of the data set's files.")
@click.option("--download", is_flag=True, help="Fetch the data set into --data if it is not there.")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N test images.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds per property, for instances.csv.",
)
def export(
    net: str,
    weights: str,
    onnx_path: str | None,
    vnnlib_dir: str | None,
    eps: float | None,
    dataset: str | None,
    data_root: str | None,
    download: bool,
    limit: int | None,
    timeout: float,
) -> None:
    """Write the trained concrete network as ONNX (checked, and compared with onnxruntime), and the
    robustness of each test image as a VNN-LIB property, for the verifiers of VNN-COMP."""
    from daic import api

    written = api.export(
        net, weights, onnx=onnx_path, vnnlib=vnnlib_dir, eps=eps, dataset=dataset, data=data_root,
        download=download, limit=limit, timeout=timeout,
    )  # fmt: skip
    if written.onnx is not None:
        gap = written.difference
        matched = f"; onnxruntime matches PyTorch within {gap:.2g}" if gap >= 0 else ""
        click.echo(f"wrote {written.onnx} (onnx checker passed{matched})")
    if vnnlib_dir is not None:
        also = " and instances.csv" if written.instances is not None else ""
        count = len(written.properties)
        click.echo(f"wrote {count} VNN-LIB properties (eps {written.epsilon:g}){also} to {vnnlib_dir}")


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        # The runtime is built and tested on these two; others (mps, xpu, meta) fail deep in a run.
        raise UsageError(f"--device {name!r}: daic runs on cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {name}: no CUDA device is available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UsageError(
                f"--device {name}: there are {torch.cuda.device_count()} CUDA devices (cuda:0 ...)"
            )
    return name


def _index_of(d: D.Diagnostic):
    from daic.dsl.source import LineIndex

    try:
        return LineIndex(Path(d.path).read_text(encoding="utf-8")) if d.path else None
    except (OSError, UnicodeDecodeError):
        return None


@main.command()
@click.option("--tcp", metavar="HOST:PORT", help="Listen on a socket instead of stdin/stdout.")
def lsp(tcp: str | None) -> None:
    """Run the language server (for editors)."""
    from daic.compiler.lsp.server import main as serve

    serve(tcp)


@main.command()
@click.argument("name", required=False)
def doc(name: str | None) -> None:
    """Document a constructor or a scheme field (or list them all by category)."""
    from daic.compiler.constructors import REGISTRY
    from daic.compiler.docs import document, documented_names, overview

    if name is None:
        click.echo(overview(REGISTRY))
        return
    text = document(REGISTRY, name)
    if text is None:
        hint = did_you_mean(name, documented_names(REGISTRY))
        what = f"no constructor or scheme field {name!r}"
        raise UsageError(what + (f"; {hint}" if hint else "; `daic doc` lists them"))
    click.echo(text)


@main.command()
@click.argument("code", required=False)
def explain(code: str | None) -> None:
    """Explain a diagnostic code: why it is reported, with an example (or list them all)."""
    from daic.compiler.checking.codes import every_code
    from daic.compiler.explain import explain as explanation

    codes = every_code()
    if code is None:
        for c in codes:
            click.echo(f"{c.id}  {c.summary}")
        return
    match = next((c for c in codes if c.id == code.upper()), None)
    if match is None:
        raise UsageError(f"unknown code {code!r}; `daic explain` lists them")
    click.echo(explanation(match))
