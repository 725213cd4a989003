"""BatchNorm: torch's forward, abstract transformers that are its affine map at the centre, one set of
statistics per training step, and Precise-BN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from daic.runtime import BatchNorm, Box, Conv2D, Flatten, HybridZonotope, Linear, ReLU, Sequential
from daic.runtime.context import AbstractContext
from daic.runtime.data.tensors import TensorData
from daic.runtime.domains import Symbolic
from daic.runtime.layers.base import trace
from daic.runtime.layers.normalization import fixed_statistics, measure, reestimate_statistics
from daic.runtime.training.goals import EpsBox, Mix, Point
from daic.runtime.training.losses import worst_case_loss
from daic.runtime.training.scheme import Scheme
from daic.runtime.training.trainer import LossModule, Trainer


@pytest.mark.parametrize("shape", [(6, 3, 4, 5), (6, 7)], ids=["image", "vector"])
def test_the_concrete_forward_is_torchs(shape):
    torch.manual_seed(0)
    ours, theirs = BatchNorm(shape[1], eps=1e-3, momentum=0.3), torch.nn.BatchNorm1d(shape[1], 1e-3, 0.3)
    if len(shape) == 4:
        theirs = torch.nn.BatchNorm2d(shape[1], 1e-3, 0.3)
    with torch.no_grad():
        for layer in (ours, theirs):
            layer.weight.copy_(torch.linspace(-1, 2, shape[1]))
            layer.bias.copy_(torch.linspace(0.5, -0.5, shape[1]))
    for step in range(3):
        x = torch.randn(shape) * (step + 1) + step
        assert torch.allclose(ours(x), theirs(x), atol=1e-5)
    assert torch.allclose(ours.running_mean, theirs.running_mean, atol=1e-5)
    assert torch.allclose(ours.running_var, theirs.running_var, atol=1e-5)
    assert int(ours.num_batches_tracked) == 3
    ours.eval(), theirs.eval()
    x = torch.randn(shape)
    assert torch.allclose(ours(x), theirs(x), atol=1e-5)


@pytest.mark.parametrize("shape", [(6, 3, 4, 5), (6, 3, 4, 5, "channels_last"), (6, 7)],
                         ids=["image", "channels-last", "vector"])  # fmt: skip
def test_the_training_gradient_through_the_batch_statistics_is_torchs(shape):
    """A training pass's statistics take the gradient, as torch's BatchNorm's do (a step's clean pass
    fixes them for its bounds): our input and parameter gradients equal torch's."""
    *dims, layout = shape if isinstance(shape[-1], str) else (*shape, None)
    torch.manual_seed(1)
    x = (torch.randn(dims, dtype=torch.float64) * 3 + 1).requires_grad_()
    if layout:
        x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    ours = BatchNorm(dims[1]).double()
    theirs = (torch.nn.BatchNorm2d if len(dims) == 4 else torch.nn.BatchNorm1d)(dims[1]).double()
    with torch.no_grad():
        for layer in (ours, theirs):
            layer.weight.copy_(torch.linspace(-1, 2, dims[1]))
            layer.bias.copy_(torch.linspace(0.5, -0.5, dims[1]))
    outward = torch.randn(dims, dtype=torch.float64)
    grads = []
    for layer in (ours, theirs):
        (layer(x) * outward).sum().backward()
        grads.append((x.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone()))
        x.grad = None
    for mine, torchs in zip(*grads, strict=True):
        torch.testing.assert_close(mine, torchs, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda v: ours.batch_statistics(v, update=False), (x,))


def random_norm(features: int) -> BatchNorm:
    layer = BatchNorm(features).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([1.5, -0.5, 2.0])[:features])
        layer.bias.copy_(torch.tensor([0.2, -0.1, 0.0])[:features])
        layer.running_mean.copy_(torch.tensor([0.3, -1.0, 0.1])[:features])
        layer.running_var.copy_(torch.tensor([0.5, 2.0, 0.04])[:features])
    return layer


@pytest.mark.parametrize("fixed", [False, True], ids=["running", "fixed"])
def test_the_abstract_transformers_are_the_affine_map_at_the_centre(fixed):
    """Each domain's value of a box is the concrete map of its centre, and the radius scaled by |scale|:
    with the running statistics (test time) and with a step's fixed statistics."""
    layer = random_norm(3)
    centre = torch.rand(4, 3, 2, 2, dtype=torch.float64)
    radius = torch.rand(4, 3, 2, 2, dtype=torch.float64) * 0.1
    if fixed:
        batch = torch.randn(16, 3, 2, 2, dtype=torch.float64)
        with fixed_statistics(layer):
            measure(layer, batch, update=False)
            check_affine(layer, centre, radius)
        mean, var = batch.mean((0, 2, 3)), batch.var((0, 2, 3), unbiased=False)
    else:
        layer.eval()
        check_affine(layer, centre, radius)
        mean, var = layer.running_mean, layer.running_var
    scale = layer.weight.detach() / torch.sqrt(var + layer.eps)
    expected = (centre - mean.view(1, 3, 1, 1)) * scale.view(1, 3, 1, 1) + layer.bias.detach().view(
        1, 3, 1, 1
    )
    with fixed_statistics(layer):
        if fixed:
            measure(layer, batch, update=False)
        box = layer.abstract(Box(centre, radius), AbstractContext(training=True))
    assert torch.allclose(box.center, expected)
    assert torch.allclose(box.radius, radius * scale.abs().view(1, 3, 1, 1))


def check_affine(layer, centre, radius):
    concrete = layer(centre)
    lower, upper = centre - radius, centre + radius
    for value in (Box(centre, radius), HybridZonotope.from_bounds(lower, upper)):
        out = layer.abstract(value, AbstractContext(training=True))
        lo, hi = out.bounds()
        assert torch.allclose((lo + hi) / 2, concrete), type(value).__name__
        corners = torch.stack(
            [layer(torch.where(torch.rand_like(centre) < 0.5, lower, upper)) for _ in range(20)]
        )
        assert bool((corners >= lo - 1e-12).all() and (corners <= hi + 1e-12).all())
    rows = torch.randn(4, 2, 3, 2, 2, dtype=torch.float64)
    symbolic = layer.abstract(Symbolic.input(lower, upper), AbstractContext(training=True))
    found = symbolic.linear_lower(rows)
    exact = (rows * concrete[:, None]).flatten(2).sum(2) - (
        rows.abs() * (upper - lower)[:, None] / 2 * 0
    ).sum()
    corners = torch.stack(
        [layer(torch.where(torch.rand_like(centre) < 0.5, lower, upper)) for _ in range(50)]
    )
    reached = (rows[None] * corners[:, :, None]).flatten(3).sum(3).amin(0)
    assert bool((found <= reached + 1e-12).all()) and bool((found <= exact + 1e-12).all())


def bn_network(conv_bias: bool = True) -> Sequential:
    torch.manual_seed(2)
    return Sequential(
        Conv2D(1, 3, 2, bias=conv_bias),
        BatchNorm(3),
        ReLU(),
        Flatten(),
        Linear(27, 4),
        BatchNorm(4),
        ReLU(),
        Linear(4, 3),
    )


def scheme(goal, **fields) -> Scheme:
    from daic.runtime.data.sets import Digits

    return Scheme(data=Digits(image=(1, 4, 4), classes=3), epsilon=0.1, goal=goal, epochs=1, **fields)


def _losses(value, y: torch.Tensor) -> list[torch.Tensor]:
    if isinstance(value, Symbolic):
        return [value.fused_loss(y).mean(), worst_case_loss(value, y).mean()]
    return [worst_case_loss(value, y).mean()]


def _layer_by_layer(net: Sequential, value, ctx: AbstractContext):
    """The pass with each layer run on its own (no layer of the sequence folded into another)."""
    for layer in net:
        value = layer.abstract(value, ctx)
    return value


@pytest.mark.parametrize("domain", ["box", "hz", "symbolic"])
@pytest.mark.parametrize("tracked", [True, False], ids=["statistics-tracked", "statistics-constant"])
@pytest.mark.parametrize("conv_bias", [True, False], ids=["conv-bias", "no-conv-bias"])
def test_a_steps_abstract_pass_folds_a_convolution_and_its_batchnorm_into_one_layer(
    domain, tracked, conv_bias
):
    """With the statistics fixed, the convolution and the BatchNorm after it run as one convolution: the
    same bounds, losses and parameter gradients as each layer run on its own, with the statistics'
    gradient (a trainer's) and without it (the conv's bias then has a gradient of its own), with a conv
    bias and without one (the fold's bias is the BatchNorm's shift), and one visit where there were two.
    The linear layer keeps its BatchNorm apart: its 108 weights outnumber the 32 outputs the map costs
    passes over."""
    net = bn_network(conv_bias).double()
    clean = torch.rand(8, 1, 4, 4, dtype=torch.float64)
    x, y = torch.rand(8, 1, 4, 4, dtype=torch.float64), torch.randint(0, 3, (8,))
    lower, upper = (x - 0.1).clamp(min=0), (x + 0.1).clamp(max=1)
    make = {"box": Box.from_bounds, "hz": HybridZonotope.from_bounds, "symbolic": Symbolic.input}[domain]
    ctx = AbstractContext(training=True)
    found = []
    for run in (lambda v: trace(net, v, ctx).output, lambda v: _layer_by_layer(net, v, ctx)):
        net.zero_grad()
        with fixed_statistics(net):
            with torch.set_grad_enabled(tracked):
                measure(net, clean, update=False)
            out = run(make(lower, upper))
            losses = _losses(out, y)
            sum(losses).backward()
        found.append((*out.bounds(), *losses, *(p.grad.clone() for p in net.parameters())))
    if conv_bias:  # with tracked statistics, a bias before a BatchNorm cancels
        assert (net[0].bias.grad.abs().max() > 1e-3) != tracked
    for folded, apart in zip(*found, strict=True):
        torch.testing.assert_close(folded, apart, rtol=1e-10, atol=1e-12)
    with fixed_statistics(net):
        measure(net, clean, update=False)
        visited = [type(layer).__name__ for layer, _ in trace(net, make(lower, upper), ctx).visits]
    assert visited == ["Conv2D", "ReLU", "Flatten", "Linear", "BatchNorm", "ReLU", "Linear"]
    assert isinstance(net[0].weight, torch.nn.Parameter) and net[0].weight.grad is not None


def test_test_time_passes_fold_nothing():
    """At test time (running statistics), even with a step's statistics still fixed, every layer runs on
    its own: a certificate's rounding is bounded for the network as it computes."""
    net = bn_network()
    box = Box.from_bounds(torch.zeros(8, 1, 4, 4), torch.ones(8, 1, 4, 4))
    with fixed_statistics(net):
        measure(net, torch.rand(8, 1, 4, 4), update=False)
        assert type(trace(net, box, AbstractContext(training=True)).visits[0][0]) is Conv2D
        net.eval()
        visited = [layer for layer, _ in trace(net, box, AbstractContext()).visits]
    assert visited == list(net)


class _Halved(torch.nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight / 2


def test_a_parametrized_convolution_is_not_folded():
    """A weight computed by torch's parametrizations is read through a property no copy can replace
    (and torch refuses to copy such a module): the pair runs apart, with the layer-by-layer pass's
    bounds."""
    net = bn_network().double()
    torch.nn.utils.parametrize.register_parametrization(net[0], "weight", _Halved())
    x = torch.rand(8, 1, 4, 4, dtype=torch.float64)
    ctx = AbstractContext(training=True)
    with fixed_statistics(net):
        measure(net, torch.rand(8, 1, 4, 4, dtype=torch.float64), update=False)
        run = trace(net, Box.from_bounds(x - 0.1, x + 0.1), ctx)
        apart = _layer_by_layer(net, Box.from_bounds(x - 0.1, x + 0.1), ctx)
    assert [layer for layer, _ in run.visits] == list(net)
    torch.testing.assert_close(run.output.bounds(), apart.bounds(), rtol=1e-10, atol=1e-12)


def test_a_training_step_bounds_with_the_clean_batchs_statistics():
    """The step's Box loss is IBP of the network whose BatchNorms are the affine maps of the clean batch's
    statistics (computed here by a separate pass), and the running statistics take in one batch a step."""
    net = bn_network()
    x = torch.rand(8, 1, 4, 4)
    y = torch.randint(0, 3, (8,))
    loss = LossModule(net, scheme(EpsBox()), (0.0, 1.0))(x, y, 0.0, torch.Generator().manual_seed(0))
    assert [int(m.num_batches_tracked) for m in net.modules() if isinstance(m, BatchNorm)] == [1, 1]
    assert all(m.fixed is None for m in net.modules() if isinstance(m, BatchNorm))
    with fixed_statistics(net):
        measure(net, x, update=False)
        box = Box.from_bounds((x - 0.1).clamp(min=0), (x + 0.1).clamp(max=1))
        expected = worst_case_loss(net.abstract(box, AbstractContext(training=True)), y).mean()
    assert torch.allclose(loss, expected)


def test_centres_take_each_abstract_parts_statistics_from_its_boxes():
    """`bn_stats = "centres"`: a Sub-scaled box around the clean batch has the clean batch's centres, so
    the loss equals the clean one; a Point part keeps the clean statistics either way."""
    net = bn_network()
    x = torch.rand(8, 1, 4, 4) * 0.6 + 0.2  # no clipping: the box centres are the images
    y = torch.randint(0, 3, (8,))
    goal = Mix(Point(), EpsBox(), 0.5)
    losses = [
        LossModule(net, scheme(goal, bn_stats=stats), (0.0, 1.0))(x, y, 0.0, torch.Generator().manual_seed(0))
        for stats in ("clean", "centres")
    ]
    assert torch.allclose(losses[0], losses[1])
    near_zero = torch.rand(8, 1, 4, 4) * 0.1  # clipped at 0: the boxes' centres are not the images
    loss = LossModule(net, scheme(EpsBox(), bn_stats="centres"), (0.0, 1.0))(
        near_zero, y, 0.0, torch.Generator().manual_seed(0)
    )
    box = Box.from_bounds((near_zero - 0.1).clamp(min=0), near_zero + 0.1)
    with fixed_statistics(net):
        measure(net, box.center, update=False)
        expected = worst_case_loss(net.abstract(box, AbstractContext(training=True)), y).mean()
        measure(net, near_zero, update=False)
        clean = worst_case_loss(net.abstract(box, AbstractContext(training=True)), y).mean()
    assert torch.allclose(loss, expected) and not torch.allclose(loss, clean)


def test_precise_bn_averages_the_statistics_of_the_training_batches():
    net = bn_network().eval()
    x = torch.rand(30, 1, 4, 4)
    reestimate_statistics(net, x, batch=10)
    assert not net.training
    means = [net[0](x[i : i + 10]).mean((0, 2, 3)) for i in (0, 10, 20)]
    assert torch.allclose(net[1].running_mean, torch.stack(means).mean(0), atol=1e-6)
    variances = [net[0](x[i : i + 10]).var((0, 2, 3), unbiased=True) for i in (0, 10, 20)]
    assert torch.allclose(net[1].running_var, torch.stack(variances).mean(0), atol=1e-6)
    assert int(net[1].num_batches_tracked) == 3


def test_a_scheme_with_precise_bn_trains_and_keeps_the_running_statistics_of_the_whole_set():
    torch.set_num_threads(1)
    net = bn_network()
    data = TensorData(
        torch.rand(40, 1, 4, 4),
        torch.randint(0, 3, (40,)),
        torch.rand(8, 1, 4, 4),
        torch.zeros(8, dtype=torch.long),
        3,
    )
    trainer = Trainer(net, scheme(EpsBox(), precise_bn=True, batch=10), data)
    row = trainer.train_epoch(0)
    assert row["loss"] > 0 and int(net[1].num_batches_tracked) == 1  # the 40 images: one batch of 100
    expected = net[0](data.train_x).mean((0, 2, 3))
    assert torch.allclose(net[1].running_mean, expected, atol=1e-5)
    result = F.softmax(net.eval()(data.test_x), 1)
    assert result.shape == (8, 3)


def test_branch_and_bound_certifies_a_batchnorm_network_soundly_and_quietly():
    """Its trained affine parameters require gradients: the search's rounding bounds must not read them as
    graph nodes (torch warned on every image) and every verified image holds at sampled points."""
    import warnings

    from daic.runtime.certification.certify import certify
    from daic.runtime.certification.search import BranchAndBound

    net = bn_network().double().eval()
    generator = torch.Generator().manual_seed(4)
    for layer in net.modules():
        if isinstance(layer, BatchNorm):
            layer.running_mean.uniform_(-0.5, 0.5, generator=generator)
            layer.running_var.uniform_(0.5, 2.0, generator=generator)
    x = torch.rand((6, 1, 4, 4), generator=generator, dtype=torch.float64)
    y = net(x).argmax(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outcomes = certify(net, [BranchAndBound(timeout=20)], x, y, 0.05, (0.0, 1.0))
    assert {o.status for o in outcomes} <= {"verified", "falsified"}
    verified = [o.index for o in outcomes if o.status == "verified"]
    assert verified
    for i in verified:
        points = x[i] + (torch.rand((200, 1, 4, 4), generator=generator, dtype=torch.float64) * 2 - 1) * 0.05
        assert bool((net(points.clamp(0, 1)).argmax(1) == y[i]).all())


def test_a_mixed_precision_maps_statistics_are_taken_in_float32():
    """Under `--amp`, a clean pass's maps are bfloat16: their statistics are those of the same numbers in
    float32 (torch's BatchNorm also computes them in float32), and the gradient comes back in bfloat16."""
    torch.manual_seed(2)
    x = (torch.randn(8, 3, 5, 5) * 4 + 2).bfloat16().requires_grad_()
    mean, var = BatchNorm(3).batch_statistics(x, update=False)
    wide = x.detach().float()
    assert mean.dtype == var.dtype == torch.float32
    torch.testing.assert_close(mean, wide.mean((0, 2, 3)), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(var, wide.var((0, 2, 3), unbiased=False), rtol=1e-6, atol=1e-6)
    (mean.sum() + var.sum()).backward()
    assert x.grad.dtype == torch.bfloat16 and x.grad.shape == x.shape
