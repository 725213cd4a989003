"""`daic init [DIR]`: a starter network and training scheme, which check clean and train on the embedded
digits with no download, written beside each other and never over an existing file."""

from __future__ import annotations

from pathlib import Path

from daic.compiler.checking.sources import UsageError, probe

NET = "model.net"
SCHEME = "train.dai"

STARTER = {
    NET: """\
# A network: one layer per line, for the embedded digits (8x8 grey images, 10 classes).
# `daic show model.net` prints each layer's output shape, neurons and parameters.
Conv2D filters=8 kernel_size=[3, 3] input_shape=[8, 8, 1] padding=1
ReLU
Linear out=64
ReLU
Linear out=10
""",
    SCHEME: """\
# A training scheme: `daic check .` checks it and its network; `daic run train.dai` trains the network,
# then attacks and certifies it (the run folder is runs/Starter). `daic doc FIELD` documents a field,
# `daic doc NAME` a constructor.

scheme Starter {
    net = "model.net"
    data = Digits
    # The radius of the L-infinity ball around each image (pixels lie in [0, 1]).
    epsilon = 0.1
    # Table 2's Mix: the clean loss, and the loss of the box around each image, phased in over 5 epochs.
    goal = Mix(Point, Sub(Lin(0, 1, 5, 1), Box), Lin(0, 0.5, 5, 1))
    epochs = 10
    batch = 50
    optimizer = Adam(lr=0.003)
    test = [Accuracy, PGD(k=10), Verify(HBox)]
}
""",
}


def write_starter(folder: Path) -> list[Path]:
    """Write the starter files into `folder` (made if missing); refuses, writing nothing, when either file
    is there already."""
    kind = probe(folder)
    if kind.kind not in ("folder", "missing"):
        raise UsageError(f"{folder}: not a folder" + (f" ({kind.reason})" if kind.reason else ""))
    targets = [folder / name for name in STARTER]
    present = [str(path) for path in targets if probe(path).kind != "missing"]
    if present:
        raise UsageError(
            f"{', '.join(present)} already exist{'s' if len(present) == 1 else ''}; init overwrites nothing"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path in targets:
            with path.open("x", encoding="utf-8") as handle:  # "x": never over a file made meanwhile
                handle.write(STARTER[path.name])
    except OSError as exc:
        raise UsageError(f"{folder}: cannot write the starter files: {exc.strerror or exc}") from exc
    return targets
