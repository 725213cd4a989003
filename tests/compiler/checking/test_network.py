"""Shape inference and counts: every stdlib network and listing against the paper's figures."""

from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from daic.compiler.checking.network import BlockNode, LayerNode, analyze_net, walk
from daic.compiler.commands.cli import main
from daic.dsl.parser import parse_net
from tests.paths import LISTINGS

NETS = Path(str(resources.files("daic.stdlib"))) / "nets"

# (neurons, params) from ../shared/spec/README.md and the paper's appendix tables.
FIGURES = {
    "resnettiny_none": (311_796, 16_467_958),
    "resnettiny_fewcombo": (311_796, 16_467_958),
    "resnettiny_manyfixed": (311_796, 16_467_958),
    "skipnet18_none": (558_080, 15_626_634),
    "skipnet18_combo": (558_080, 15_626_634),
    "resnet18_none": (558_080, 15_626_634),
    "resnet34_none": (967_680, 25_731_082),
    "resnetlarge_largecombo": (639_976, 65_819_474),
    "densenet100_none": (4_500_546, 748_336),
    "mnist_ffnn": (500, 119_910),
    "mnist_convsmall": (3_604, 89_606),
    "mnist_convmed": (4_804, 166_406),
    "mnist_convbig": (48_064, 1_974_762),
    "mnist_convlargeibp": (175_816, 5_426_402),
    "mnist_truncatedvgg": (151_040, 13_109_706),
    "cifar10_ffnn": (500, 348_710),
    "cifar10_convsmall": (4_852, 125_318),
    "cifar10_convmed": (6_244, 214_918),
    "cifar10_convbig": (62_464, 2_466_858),
    "cifar10_convlargeibp": (229_576, 6_963_554),
    "cifar10_truncatedvgg": (197_120, 17_043_018),
}


def analyze(path: Path, **kwargs):
    return analyze_net(parse_net(path.read_text()).tree, **kwargs)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_stdlib_counts_equal_the_paper(name):
    network = analyze(NETS / f"{name}.net")
    assert network.diagnostics == []
    assert (network.neurons, network.params) == FIGURES[name]
    assert network.output_shape == (10,)


@pytest.mark.parametrize("path", sorted(LISTINGS.glob("*.net")), ids=lambda p: p.stem)
def test_verbatim_listings_count_like_the_stdlib(path):
    network = analyze(path)
    if path.stem == "densenet100_none":
        # Without kernel sizes the shapes after the first transition are unknown.
        assert [d.code.id for d in network.diagnostics] == ["E106", "E106", "E106"]
    else:
        assert network.diagnostics == []
        assert (network.neurons, network.params) == FIGURES[path.stem]


def test_shapes_through_blocks():
    network = analyze(NETS / "resnettiny_fewcombo.net")
    blocks = [n for n, _ in walk(network.nodes) if isinstance(n, BlockNode)]
    assert len(blocks) == 5
    assert blocks[1].in_shape == (16, 32, 32) and blocks[1].out_shape == (32, 32, 32)
    assert blocks[1].branch_shapes == ((32, 32, 32), (32, 32, 32))
    dense = analyze(NETS / "densenet100_none.net")
    cat = next(n for n, _ in walk(dense.nodes) if isinstance(n, BlockNode))
    assert (cat.kind, cat.in_shape, cat.out_shape) == ("cat", (24, 32, 32), (36, 32, 32))
    assert cat.branches[0] == []  # SkipNet1 with no lines: the identity


def test_input_from_the_data_set_and_class_count():
    net = NETS / "digits_conv.net"
    network = analyze(net, input_shape=(1, 8, 8), classes=10)
    assert network.diagnostics == []
    first = next(n for n, _ in walk(network.nodes) if isinstance(n, LayerNode) and n.layer.kind == "Conv2D")
    assert (first.in_shape, first.out_shape, first.params) == ((1, 8, 8), (16, 8, 8), 160)
    network = analyze(net, input_shape=(1, 8, 8), classes=100)
    assert [d.code.id for d in network.diagnostics] == ["E133"]


def test_an_empty_network_cannot_classify():
    network = analyze_net(parse_net("").tree, (1, 8, 8), 10)
    assert [(d.code.id, d.message) for d in network.diagnostics if d.is_error] == [
        ("E133", "the network ends with shape [8, 8, 1], but the data set has 10 classes")
    ]


@pytest.mark.parametrize(
    "line",
    [
        "MaxPool2D kernel_size=2 stride=0",
        "Conv2D filters=4 kernel_size=3 stride=[0, 0]",
        "AvgPool2D kernel_size=0",
    ],
)
def test_a_window_out_of_range_is_reported_without_a_shape(line):
    network = analyze_net(parse_net(f"{line} input_shape=[8, 8, 1]\nLinear out=10\n").tree)
    codes = [d.code.id for d in network.diagnostics]
    assert codes and set(codes) == {"E108"}  # one per zero: `[0, 0]` gives two
    assert "must be >= 1, got 0" in network.diagnostics[0].message


@pytest.mark.parametrize(
    ("shape", "code", "message"),
    [
        ("[-8, 8, 1]", "E108", "`input_shape` must be >= 1, got -8"),
        ("[8, 8]", "E131", "input_shape has 2 values; it is [height, width, channels] or [features]"),
        ("[]", "E131", "input_shape has 0 values"),
    ],
)
def test_input_shape_annotations_are_checked(shape, code, message):
    network = analyze_net(parse_net(f"Linear out=10 input_shape={shape}\n").tree)
    assert [d.code.id for d in network.diagnostics] == [code]
    assert network.diagnostics[0].message.startswith(message)
    assert network.params == 0  # nothing is counted from a shape that is not one


def test_show_prints_rows_and_totals():
    result = CliRunner().invoke(main, ["show", str(NETS / "resnettiny_fewcombo.net")])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    total = next(line for line in lines if "Total" in line)
    assert "311,796" in total and "16,467,958" in total
    assert any("│     Conv2D filters=16 kernel_size=[1, 1]" in line and "16×32×32" in line for line in lines)
    assert sum("ParSum" in line for line in lines) == 5


def test_show_with_input_option_and_errors(tmp_path):
    net = tmp_path / "n.net"
    net.write_text("Linear out=10\n")
    result = CliRunner().invoke(main, ["show", str(net), "--input", "1,8,8"])
    assert result.exit_code == 0
    assert "650" in next(line for line in result.stdout.splitlines() if "Total" in line)
    assert CliRunner().invoke(main, ["show", str(net), "--input", "a,b"]).exit_code == 2


def test_show_without_an_input_shape_is_a_usage_error(tmp_path):
    net = tmp_path / "flat.net"
    net.write_text("Linear out=10\nReLU\n")
    result = CliRunner().invoke(main, ["show", str(net)])
    assert result.exit_code == 2
    assert result.stdout == ""  # no table of `?`
    assert result.stderr == f"daic: {net}: no input shape: give --input C,H,W or an input_shape annotation\n"


BROKEN_BLOCKS = [
    (
        "ParNet1\n    ReLU\nParNet2\nLinear out=10\n",
        4,
        "`ParSum` missing before `Linear` (the block that `ParNet1` opens at line 1)",
    ),
    (
        "Linear out=10 input_shape=[4]\nParNet1\n    ReLU\nParNet2\n",
        2,
        "`ParSum` missing at the end of the file: the block that `ParNet1` opens at line 2 is not closed",
    ),
    (
        "SkipNet1\nSkipNet2\nParSum\n",
        3,
        "`ParSum` cannot close the block that `SkipNet1` opens at line 1: it ends with `SkipCat`",
    ),
    (
        "ParNet1\nParSum\n",
        2,
        "`ParNet2` missing before `ParSum` (the block that `ParNet1` opens at line 1)",
    ),
    (
        "ParNet1\n    SkipNet1\n    SkipNet2\nParNet2\nParSum\n",
        2,
        "`SkipCat` missing at the end of the `ParNet1` branch: the block that `SkipNet1` opens at line 2 "
        "is not closed",
    ),
]


@pytest.mark.parametrize(("text", "line", "message"), BROKEN_BLOCKS)
def test_a_broken_block_is_one_error_naming_what_is_missing_and_where_it_began(text, line, message):
    network = analyze_net(parse_net(text).tree)
    assert [(d.code.id, d.span.line, d.message) for d in network.diagnostics] == [("E120", line, message)]
