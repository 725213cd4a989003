"""`daic verify` of a test set: the images certified at one radius (`verify`), or at several, a curve
(`curve`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from daic.compiler.jobs.curve import radii, verify_curve
from daic.compiler.jobs.verify import Settings, certify_radius, prepare
from daic.compiler.jobs.weights import certified_epsilon

if TYPE_CHECKING:
    from daic.runtime.training.distributed import Group


def verify_test_set(
    settings: Settings, group: Group, display: Callable[[Counter, int, float], None]
) -> dict[str, Any] | list[dict[str, Any]]:
    """Certifies this process's share of the images at one radius, and returns the summary of the whole
    record (rank 0's view after merging; other ranks return their own part's); or, given several radii
    (`--eps` as written), a curve: the summary of each radius."""
    epsilons = radii([str(e) for e in settings.eps])
    if len(epsilons) > 1:
        return verify_curve(settings, epsilons, group, display)
    certification = prepare(settings, group)
    epsilon = certified_epsilon(certification.state, epsilons[0] if epsilons else None)
    return certify_radius(certification, epsilon, settings.out, settings.resume, group, display)
