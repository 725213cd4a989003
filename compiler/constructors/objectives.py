"""Goals (Table 2 and Section 4.2) and schedules (Section 4.1): what a training scheme optimises."""

from __future__ import annotations

from daic.compiler.registry import Category, Constructor, Param, ScheduleFacts
from daic.compiler.types import ACTIVATION, BOOL, FLOAT, GOAL, INT, SCHEDULE

RT_GOALS = "daic.runtime.training.goals:"
RT_SCHEDULES = "daic.runtime.training.schedules:"


def _goal(name, doc, *params, forms=(), several=False, runtime=None):
    """A goal; `runtime` names its class where the language's name would say something else there (the
    goal `Box` is `EpsBox`: `Box` is the interval domain's value)."""
    return Constructor(
        name,
        Category.GOAL,
        GOAL,
        tuple(params),
        doc,
        RT_GOALS + (runtime or name),
        forms=forms,
        several=several,
    )


def _point_and_bound(weight_doc: str) -> tuple[Param, ...]:
    """The parameters of the expressive losses: two goals of one abstraction each, and a weight."""
    return (
        Param("g1", GOAL, doc="The first goal (the paper's adversarial point).", abstractions="one"),
        Param("g2", GOAL, doc="The second goal (the paper's IBP bound).", abstractions="one"),
        Param("weight", SCHEDULE, doc=weight_doc, low=0, high=1),
    )


RAMP = ScheduleFacts(lambda args, settles: args["hold"] + args["steps"])
"""A ramp (Lin, Smooth) ends `steps` epochs after its `hold`."""


def _ramp(steps_doc: str) -> tuple[Param, ...]:
    """The parameters of a ramp from `start` to `end` (Lin, Smooth)."""
    return (
        Param("start", FLOAT, doc="The value for the first `hold` epochs.", reached=True),
        Param("end", FLOAT, doc="The value after the ramp.", reached=True),
        Param("steps", FLOAT, doc=steps_doc, low=0),
        Param("hold", FLOAT, 0, "Epochs at `start` before the ramp begins.", low=0),
    )


DECLARATIONS = [
    _goal("Point", "Trains on the centre (l + u) / 2 of the input box, with cross-entropy (Table 2)."),
    _goal(
        "Normal",
        "Trains on a point drawn from a normal distribution around the box and clipped to it, with "
        "cross-entropy (Table 2).",
    ),
    _goal("Uniform", "Trains on a point drawn uniformly from the input box, with cross-entropy (Table 2)."),
    _goal(
        "IFGSM",
        "IFGSM_k: trains on the adversarial example found by k iterations of FGSM inside the box, with "
        "cross-entropy (Table 2). The paper's IFGSM_k is written IFGSM(k) or IFGSM_k.",
        Param("k", INT, doc="Iterations.", low=1, subscript=True),
        runtime="IFGSMPoint",
    ),
    _goal(
        "PGD",
        "Trains on the point of highest cross-entropy that k steps of projected gradient descent find in "
        "the box, from `restarts` random starts: each step moves every pixel by step x the box's radius "
        "there, in the gradient's sign direction, and is a tenth as large from step ceil(k/2), again from "
        "ceil(0.8k) and ceil(0.9k) (SABR's schedule; its defaults are SABR's, Müller et al., ICLR 2023). "
        "PGD(1, 10) is De Palma et al.'s attack for MTL-IBP and CC-IBP (one step of ten radii from a random "
        "start, clipped to the box). In a training step the attack sees the step's BatchNorm statistics "
        "(SABR's code attacks with the running ones).",
        Param("k", INT, 8, "Steps.", low=1),
        Param(
            "step", FLOAT, 0.5, "The first steps' size, relative to the box's radius.", low=0, low_open=True
        ),
        Param("restarts", INT, 1, "Random starts.", low=1),
        runtime="PGDPoint",
    ),
    _goal(
        "Box",
        "Propagates the box <(l + u)/2, (u - l)/2, 0> and trains on the worst-case logits of its "
        "concretization with cross-entropy (Table 2). With folded=True, IBP as Gowal et al., CROWN-IBP, "
        "auto_LiRPA, CTBench and CTRAIN define it: the margins y_t - y_j are folded into the layers after "
        "the last ReLU (the specification e_t - e_j times the last linear layer) before intervals are "
        "taken, as every verification domain bounds them; abstract layers do not act on that pass.",
        Param(
            "folded",
            BOOL,
            False,
            "Bound the margins with the specification folded into the layers after the last ReLU.",
        ),
        runtime="EpsBox",
    ),
    _goal(
        "CROWNIBP",
        "CROWN-IBP (Zhang et al., ICLR 2020): interval bounds for every layer, then the margins y_t - y_j "
        "back-substituted once through CROWN's linear relaxations; trains with cross-entropy on the "
        "worst-case logits of the margin lower bound beta * CROWN-IBP + (1 - beta) * IBP (both with the "
        "specification folded into the last layer). The paper anneals beta from 1 to 0 while epsilon "
        "grows: CROWNIBP(Lin(1, 0, 60, 10)). Gradients flow through both bounds. With fused=True, "
        "auto_LiRPA's loss fusion: one row is back-substituted instead of one per class, and the loss is "
        "the log of an upper bound of sum_j exp(y_j - y_t) (exp bounded by its chord over the margins' "
        "intervals), beta mixing the CROWN-IBP and interval bounds of that sum; an upper bound of every "
        "point's cross-entropy too, several times cheaper, and looser where the intervals are wide.",
        Param("beta", SCHEDULE, 1, "The weight of the CROWN-IBP bound.", low=0, high=1),
        Param("fused", BOOL, False, "Loss fusion: one back-substitution row instead of one per class."),
    ),
    _goal(
        "Mix",
        "The Cartesian product of two goals' abstractions, each propagated once; the loss is "
        "(1 - weight) * loss_g1 + weight * loss_g2 (Table 2).",
        Param("g1", GOAL, doc="The first goal.", abstractions="passed"),
        Param("g2", GOAL, doc="The second goal.", abstractions="passed"),
        Param("weight", SCHEDULE, doc="lambda, the weight of g2's loss.", low=0, high=1),
        several=True,
    ),
    _goal(
        "CCMix",
        "CC-IBP (De Palma et al., ICLR 2024): one cross-entropy on the convex combination (1 - weight) * "
        "m_g1 + weight * m_g2 of the two goals' upper bounds m of the logit differences y_j - y_t (at a "
        "point, the differences themselves). The paper's CC-IBP is CCMix(PGD(1, 10), Box, alpha), PGD(1, 10) "
        "its attack (one step of 10 radii from a random start, clipped to the box); MTL-IBP, a convex "
        "combination of the two losses, is Mix(PGD(1, 10), Box, alpha).",
        *_point_and_bound("alpha, the weight of g2's margins."),
        several=True,
    ),
    _goal(
        "ExpMix",
        "Exp-IBP (De Palma et al., ICLR 2024): the product of powers loss_g1 ** (1 - weight) * loss_g2 ** "
        "weight of the two goals' losses, each the mean over the batch, as the paper's code computes it.",
        *_point_and_bound("alpha, the power of g2's loss."),
        several=True,
    ),
    _goal(
        "Sub",
        "Runs g on the box scaled about its centre by delta: l' = (u + l - delta(u - l)) / 2, "
        "u' = (u + l + delta(u - l)) / 2 (Table 2).",
        Param("delta", SCHEDULE, doc="The scale of the box.", low=0),
        Param("g", GOAL, doc="The goal run on the scaled box.", abstractions="passed"),
    ),
    _goal(
        "Sample",
        "Finds a point b as the centre of Sub(1 - r * delta, g_s), then runs g_t on the box of width delta "
        "around b (Table 2). Written Sample(delta, g_s, g_t) (r = 1, as in Section 4.2) or "
        "Sample(delta, r, g_s, g_t).",
        Param("delta", SCHEDULE, doc="The width of the sampled box, relative to the input box.", low=0),
        Param("r", SCHEDULE, 1, "How far from the centre the sample may fall.", low=0),
        Param("g_s", GOAL, doc="The goal that picks the sample's centre.", abstractions="one"),
        Param("g_t", GOAL, doc="The goal trained on the sampled box.", abstractions="passed"),
        forms=(("delta", "g_s", "g_t"), ("delta", "r", "g_s", "g_t")),
    ),
    _goal(
        "SmallBox",
        "SABR (Müller et al., ICLR 2023): g on a small box of `size` times the input box's radius, centred "
        "on the point that `attack` finds in the whole box and moved, per dimension, as little as needed to "
        "lie inside it. SABR's radius is size x eps, clipped to [0, 1]; this one is size x the clipped "
        "box's radius (CTBench's), the same away from the value range's edges. Sample(size, 1, attack, g) "
        "differs: it attacks only the shrunk box that the small box's centre may take.",
        Param(
            "size", SCHEDULE, doc="lambda, the small box's radius relative to the input box's.", low=0, high=1
        ),
        Param("attack", GOAL, "PGD", "The goal that picks the small box's centre.", abstractions="one"),
        Param("g", GOAL, "Box", "The goal trained on the small box.", abstractions="passed"),
    ),
    _goal(
        "BiSample",
        "Runs g2 on the box centred on the input whose radius is how far g1's abstraction reaches: "
        "l', u' = (l + u)/2 -/+ |UB(alpha_g1(l, u)) - (l + u)/2| (Table 2).",
        Param("g1", GOAL, doc="The goal whose reach sets the box.", abstractions="one"),
        Param("g2", GOAL, doc="The goal trained on that box.", abstractions="passed"),
    ),
    Constructor(
        "Lin",
        Category.SCHEDULE,
        SCHEDULE,
        _ramp("Epochs over which the value moves linearly from start to end."),
        "Linear annealing: start for the first `hold` epochs, then linearly to end over `steps` epochs. "
        "The argument order is the reference implementation's, which produced the paper's numbers; the "
        "prose of Section 4.1 describes Lin(a, b, m, n) with m and n swapped.",
        RT_SCHEDULES + "Lin",
        schedule=RAMP,
    ),
    Constructor(
        "Smooth",
        Category.SCHEDULE,
        SCHEDULE,
        _ramp("Epochs of the ramp from start to end."),
        "The epsilon ramp of Shi et al. (NeurIPS 2021) that SABR, TAPS, MTL-IBP and CTBench use: start for "
        "`hold` epochs, then over `steps` epochs a fourth power for the first quarter and linear after it, "
        "joined with the same slope (a 13th of the way at the quarter), then end.",
        RT_SCHEDULES + "Smooth",
        schedule=RAMP,
    ),
    Constructor(
        "Until",
        Category.SCHEDULE,
        SCHEDULE,
        (
            Param("epoch", FLOAT, doc="When to switch.", low=0, lower_as="m"),
            Param("first", SCHEDULE, doc="The schedule before `epoch`."),
            Param(
                "then",
                SCHEDULE,
                doc="The schedule after `epoch`, given the time minus `epoch`.",
                lower_as="second",
            ),
        ),
        "first until `epoch` epochs have passed, then `then` on the time since (Section 4.1).",
        RT_SCHEDULES + "Until",
        # `first` is cut at `epoch`; `then` starts there.
        schedule=ScheduleFacts(lambda args, settles: args["epoch"] + settles(args["then"])),
    ),
    *(
        Constructor(name, Category.ACTIVATION, ACTIVATION, (), doc, "daic.runtime.layers.deep_loss:" + name)
        for name, doc in (
            ("relu", "max(x, 0): the f of DeepLoss in the paper's experiments."),
            ("softplus", "log(1 + exp(x)), a smooth positive activation."),
        )
    ),
]
