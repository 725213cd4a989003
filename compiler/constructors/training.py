"""Optimisation and evaluation: optimizers, learning-rate steps, tests (accuracy, attacks, verification)
and the verification domains."""

from __future__ import annotations

from daic.compiler.registry import Category, Constructor, Param, ScheduleFacts
from daic.compiler.types import BOOL, DOMAIN, FLOAT, INT, LR_SCHEDULE, OPTIMIZER, STR, TEST, ListOf, OneOf

RT = "daic.runtime.training.optim:"
RT_EVAL = "daic.runtime.certification.evaluate:"
RT_VERIFY = "daic.runtime.certification.verification:"

_INTERMEDIATE = Param(
    "intermediate",
    STR,
    "crown",
    'Where the ReLUs\' input bounds come from: "crown" (back-substitution of every such layer, full '
    'CROWN), "box" (intervals: CROWN-IBP), "hbox" (the exact-input hybrid zonotope) or "best" (the '
    "elementwise best of the three).",
    choices=("crown", "box", "hbox", "best"),
)

SEARCH_TIMEOUT = Param(
    "timeout", FLOAT, 60.0, "Seconds per image before it is left unknown.", low=0, low_open=True
)
"""The time limit of a complete search (BranchAndBound, InputSplit: `search.Search`)."""

DECLARATIONS = [
    Constructor(
        "SGD",
        Category.OPTIMIZER,
        OPTIMIZER,
        (
            Param("lr", FLOAT, 0.1, "Initial learning rate.", low=0, low_open=True),
            Param("momentum", FLOAT, 0.9, "Momentum.", low=0, high=1),
            Param("weight_decay", FLOAT, 0.0, "L2 regularisation constant.", low=0),
            Param("nesterov", BOOL, False, "Nesterov momentum."),
        ),
        "Stochastic gradient descent with momentum (the paper's SkipNet-18, ResNet-18/34, DenseNet-100: "
        "lr 0.1).",
        RT + "SGD",
    ),
    Constructor(
        "Adam",
        Category.OPTIMIZER,
        OPTIMIZER,
        (
            Param("lr", FLOAT, 0.001, "Initial learning rate.", low=0, low_open=True),
            Param("weight_decay", FLOAT, 0.0, "L2 regularisation constant.", low=0),
        ),
        "Adam (the paper's ResNet-Tiny: lr 0.001, L2 0.01).",
        RT + "Adam",
    ),
    Constructor(
        "Steps",
        Category.LR,
        LR_SCHEDULE,
        (
            Param("at", ListOf(INT), doc="Epochs at which the rate is multiplied by `factor`.", low=0),
            Param("factor", FLOAT, 0.1, "The multiplier.", low=0, low_open=True),
        ),
        "Multiplies the learning rate by `factor` at each listed epoch (the paper: x0.1 at 10, 20, 250, "
        "300).",
        RT + "Steps",
        schedule=ScheduleFacts(lambda args, settles: max(args["at"], default=0)),
    ),
    Constructor(
        "Accuracy", Category.TEST, TEST, (), "Standard accuracy on the test set.", RT_EVAL + "Accuracy"
    ),
    Constructor(
        "MIFGSM",
        Category.TEST,
        TEST,
        (
            Param("k", INT, 20, "Iterations.", low=1),
            Param("mu", FLOAT, 0.8, "Momentum decay.", low=0),
            Param(
                "step",
                FLOAT,
                None,
                "Step size; epsilon / 10 when not given (the paper's 0.0031373 is that at 8/255).",
                low=0,
                low_open=True,
            ),
        ),
        "Accuracy under the momentum iterative FGSM attack (the paper: mu 0.8, 20 iterations, "
        "step 0.0031373).",
        RT_EVAL + "MIFGSMAccuracy",
    ),
    Constructor(
        "PGD",
        Category.TEST,
        TEST,
        (
            Param("k", INT, 20, "Iterations.", low=1),
            Param("step", FLOAT, None, "Step size; 2.5 * epsilon / k when not given.", low=0, low_open=True),
            Param("restarts", INT, 1, "Random restarts.", low=1),
        ),
        "Accuracy under projected gradient descent with random starts.",
        RT_EVAL + "PGDAccuracy",
    ),
    Constructor(
        "Verify",
        Category.TEST,
        TEST,
        (
            Param(
                "domain",
                OneOf(DOMAIN, ListOf(DOMAIN)),
                "HBox",
                "The domain that certifies, or a list of them tried in order per image, cheapest first "
                "(Verify([Box, CROWN, BranchAndBound(timeout=30)])).",
            ),
        ),
        "Verified robustness: the share of test images whose epsilon-ball the domain proves classified "
        "correctly. With a list, each image goes to the next domain only while the earlier ones left it "
        "undecided; an attack runs before a complete one (BranchAndBound).",
        RT_EVAL + "Verify",
    ),
    Constructor(
        "Box",
        Category.DOMAIN,
        DOMAIN,
        (),
        "Intervals (interval bound propagation), with the margins y_t - y_j folded into the layers after "
        "the last ReLU, as IBP is reported. The cheapest domain.",
        RT_VERIFY + "BoxBound",
    ),
    Constructor(
        "HBox",
        Category.DOMAIN,
        DOMAIN,
        (),
        "The hybrid zonotope with one correlated term per input dimension, only_train layers skipped, as the "
        "reference implementation verified (Section 5); the margins folded into the last layers.",
        RT_VERIFY + "HBoxBound",
    ),
    Constructor(
        "CROWN",
        Category.DOMAIN,
        DOMAIN,
        (_INTERMEDIATE,),
        "Linear relaxations back-substituted to the input (CROWN, Zhang et al. 2018; DeepPoly is the same): "
        "each ReLU lies between two lines chosen from its input's bounds, and the margins y_t - y_j are "
        "moved back through every layer to the input box. Tighter than Box and usually than HBox on "
        "networks trained with linear relaxations; costs a backward pass per ReLU layer with full "
        'intermediate bounds ("crown"), one with "box".',
        RT_VERIFY + "CROWNBound",
    ),
    Constructor(
        "AlphaCROWN",
        Category.DOMAIN,
        DOMAIN,
        (
            Param("steps", INT, 20, "Adam iterations on the slopes.", low=0),
            Param("lr", FLOAT, 0.5, "Adam's learning rate (decayed by 0.98 a step).", low=0, low_open=True),
            _INTERMEDIATE,
            Param(
                "layers",
                STR,
                "output",
                'Whose slopes are optimised: "output" (the margins\' rows, intermediate bounds fixed) or '
                '"all" (every layer\'s: each intermediate bound recomputed at every step with slopes of its '
                "own rows, as auto_LiRPA's CROWN-Optimized).",
                choices=("output", "all"),
            ),
        ),
        "CROWN whose ReLU lower slopes, one per image, margin and unstable neuron, are optimised by Adam "
        "from CROWN's choice (alpha-CROWN, Xu et al. 2021), intermediate bounds fixed unless `layers` "
        "says otherwise. Every slope in [0, 1] is sound; the best bound seen is kept, so it is never looser "
        "than CROWN.",
        RT_VERIFY + "AlphaCROWNBound",
    ),
    Constructor(
        "BranchAndBound",
        Category.DOMAIN,
        DOMAIN,
        (
            SEARCH_TIMEOUT,
            Param(
                "batch",
                INT,
                1024,
                "The most subdomains of an image split in a round of the search (fewer where their "
                "children would take more than a quarter of its time left); while fewer are open, each is "
                "split on several neurons at once (up to 7), so that a round bounds up to twice this many "
                "children, in passes that fit 1 GiB (a share of the free memory on a GPU).",
                low=1,
            ),
            Param("steps", INT, 20, "Adam steps on the slopes and split multipliers per bounding.", low=0),
            Param(
                "root_steps",
                INT,
                50,
                "Adam steps of alpha-CROWN before the search: on each layer's intermediate bounds (as "
                "AlphaCROWN: rate 0.5, decayed by 0.98 a step), then on the margins at the search's rates "
                "(0: none; the search's own bounds take `steps`).",
                low=0,
            ),
            Param(
                "candidates",
                INT,
                3,
                "Neurons tried per subdomain before it is split: the best-scored few, each one's two "
                "children bounded by CROWN, and the one whose worse child is bounded highest split "
                "(filtered smart branching, as alpha-beta-CROWN's kfsb); 1: the score alone decides.",
                low=1,
            ),
            Param(
                "intermediate",
                STR,
                "auto",
                'Where a subdomain\'s ReLU-input bounds come from: "crown" (CROWN again, with its splits), '
                "\"root\" (the root's, refined, with the splits clamped in: beta-CROWN's way, one "
                'back-substitution per subdomain), or "auto": "crown" where subdomains cut their boxes (a '
                "network with Sigmoid, Tanh or HardTanh) and the "
                'root\'s CROWN pass took at most 2% of the time limit, else "root" (every ReLU network: '
                "a split leaves the box whole, and CROWN again grew the same trees on an MNIST ConvSmall "
                "in twice the time).",
                choices=("auto", "crown", "root"),
            ),
        ),
        "Complete verification: a targeted attack first (four trajectories from random starts towards each "
        "other class, each pushing that margin below zero, as alpha-beta-CROWN attacks), then alpha-CROWN at "
        "the root (each "
        "layer's unstable neurons bounded with the earlier ReLUs' slopes optimised, then the margins), then "
        "branch and bound over ReLU splits of the margins the root leaves open (the neuron whose upper "
        "relaxation costs most first, BaBSR's score; a subdomain's children bound only the margins it "
        "leaves open), each subdomain bounded by CROWN with its split neurons "
        "fixed and, on networks whose subdomains cut their boxes and whose CROWN pass is cheap, every later "
        "layer's bounds recomputed (always "
        "intersected with the root's best of alpha-CROWN, CROWN, intervals and the hybrid zonotope; "
        "`intermediate`), then alpha- and beta-CROWN (the split constraints' "
        "multipliers, Wang et al. 2021) optimised from where its parent's were best, and the better of that "
        "and the margins folded over the intervals kept; a subdomain with no unstable neuron is decided by a "
        "linear program. The root's layer-by-layer alpha-CROWN gets at most half the time left after its "
        "first bound and attack. While it splits, a fifth of its time goes to more attacks from new random "
        "starts; every phase keeps to the time limit. "
        "Every image ends verified, falsified (by a point the network misclassifies) or, past the time "
        "limit, unknown.",
        "daic.runtime.certification.search:BranchAndBound",
        aliases=("BaB",),
    ),
    Constructor(
        "InputSplit",
        Category.DOMAIN,
        DOMAIN,
        (
            SEARCH_TIMEOUT,
            Param("batch", INT, 512, "Boxes bounded together per step of the search.", low=1),
        ),
        "Complete verification for networks of few inputs (ACAS Xu's 5): branch and bound over the input "
        "box, each undecided box halved along the input that moves its least margin most (the margin's "
        "gradient at its centre times its width, ReluVal's smear, plus a share of its relative width) and "
        "bounded by CROWN, each box's centre run through the network. Every image ends verified, falsified "
        "or, past the time limit, unknown. Where inputs are many (images), BranchAndBound's ReLU splits do "
        "better.",
        "daic.runtime.certification.search:InputSplit",
    ),
]
