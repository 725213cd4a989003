"""Messages that say what is wrong and how to fix it: suggestions as the file must write them, numbers as
a person writes them, hints that fit the case, and one error for one mistake."""

from daic.compiler.checking.check import check_source
from daic.compiler.checking.sources import Source


def problems(text: str, language: str = "dai") -> list[tuple[str, str, str | None]]:
    report = check_source(Source(f"a.{language}", language, text))
    return [(d.code.id, d.message, d.hint) for d in report.diagnostics]


def test_a_name_from_an_import_with_as_is_suggested_qualified():
    found = problems(
        "import stdlib.schemes as s\nimport stdlib.goals as g\n"
        "scheme Mine extends Baseline {\n    epochs = 1\n}\nlet x = InSampLPA\n"
    )
    assert found == [
        ("E101", "unknown scheme `Baseline`", "did you mean `s.Baseline`?"),
        ("E101", "unknown name `InSampLPA`", "did you mean `g.InSampLPA`?"),
    ]


def test_range_errors_show_numbers_without_float_noise():
    found = problems(
        "let a = Mix(Point, Box, 0.2 - 0.3)\nlet b = Mix(Point, Box, Lin(0.2 - 0.3, 1, 3, 1))\n"
        "let c = Mix(Point, Box, 1 + 2e-16)\n"
    )
    assert [message for _, message, _ in found] == [
        "`weight` must be in [0, 1], got -0.1",
        "`weight` must be >= 0 at every epoch; this schedule reaches -0.1",
        # Rounded, it would be 1, which is in range: then every digit is shown.
        "`weight` must be in [0, 1], got 1.0000000000000002",
    ]


def test_concatenating_vectors_gets_no_hint_about_height_and_width():
    found = problems(
        "Linear out=100 input_shape=[8]\nSkipNet1\n    Linear out=10\nSkipNet2\nSkipCat dim=1\n", "net"
    )
    assert found == [
        (
            "E132",
            "cannot concatenate branches of shapes [10] and [100] along the channels",
            "`SkipCat` joins the channels of images ([height, width, channels]); a branch that ends in a "
            "vector has none",
        )
    ]


def test_positional_arguments_after_a_keyword_are_one_error():
    assert problems("let g = Mix(g1=Point, Box, 0.5)\n") == [
        (
            "E011",
            "positional arguments after the keyword argument `g1`",
            "put positional arguments first, or name these too",
        )
    ]
    # A mistake of its own inside such a call is still reported.
    assert [code for code, _, _ in problems("let g = Mix(Point, weight=0.5, Boxx)\n")] == ["E011", "E101"]


def test_a_goal_of_several_abstractions_where_one_is_taken_is_a_type_error():
    """Sample's g_s, BiSample's g1 and the expressive losses' goals take one abstraction: a Mix there,
    or a goal that hands a Mix's parts on, would fail at run time."""
    found = problems(
        "let a = Sample(0.5, Mix(Point, Box, 0.5), Box)\n"
        "let b = BiSample(Sub(0.5, CCMix(Point, Box, 0.5)), Box)\n"
        "let c = ExpMix(Point, Sample(0.5, Point, Mix(Point, Box, 0.1)), 0.5)\n"
        # Where the parts are handed on, a goal of several abstractions is fine.
        "let d = Mix(Sub(0.5, CCMix(IFGSM(1), Box, 0.5)), Sample(0.5, Point, ExpMix(Point, Box, 0.5)), 0.5)\n"
        "let e = BiSample(Point, Mix(Point, Box, 0.5))\n"
    )
    assert found == [
        ("E107", "`g_s` takes a goal of one abstraction; `Mix` trains on several",
         "give `g_s` one of the `Mix`'s goals, or put the `Mix` outside"),
        ("E107", "`g1` takes a goal of one abstraction; `Sub` trains on the several of the `CCMix` inside it",
         "give `g1` one of the `CCMix`'s goals, or put the `CCMix` outside"),
        ("E107",
         "`g2` takes a goal of one abstraction; `Sample` trains on the several of the `Mix` inside it",
         "give `g2` one of the `Mix`'s goals, or put the `Mix` outside"),
    ]  # fmt: skip


IMAGE_FOLDER_SCHEME = """scheme Folders {
    net = "m.net"
    data = ImageFolder(path="%s", size=%d, classes=2%s)
    epsilon = 0.1
    goal = Box
    epochs = 1
}
"""
SMALL_CNN = "Conv2D filters=4 kernel_size=[3, 3] stride=[2, 2] padding=1\nReLU\nLinear out=2\n"


def _image_folder_scheme(folder, size=16, extra="", net=SMALL_CNN):
    (folder / "m.net").write_text(net)
    scheme = folder / "s.dai"
    scheme.write_text(IMAGE_FOLDER_SCHEME % (folder / "images", size, extra))
    return scheme


def test_image_folder_shapes_come_from_its_arguments(tmp_path):
    """ImageFolder's images are [size, size, 3] (1 channel with grey=True) and its classes are written: the
    network is checked against them, and the runtime's loader is handed them."""
    from daic.compiler.checking.check import check_path
    from daic.compiler.jobs.run import plan_run
    from daic.compiler.lower import lower_value

    report = check_path(str(_image_folder_scheme(tmp_path)))
    assert [d.message for d in report.diagnostics] == []
    assert report.module.schemes["Folders"].network.input_shape == (3, 16, 16)
    plan = plan_run(str(tmp_path / "s.dai"), None, None)
    data = lower_value(plan.scheme.built).data
    assert (data.image, data.classes, data.root) == ((3, 16, 16), 2, str(tmp_path / "images"))

    annotated = "Conv2D filters=4 kernel_size=[3, 3] input_shape=[16, 16, 3] padding=1\nReLU\nLinear out=2\n"
    report = check_path(str(_image_folder_scheme(tmp_path, extra=", grey=True", net=annotated)))
    assert [d.message for d in report.diagnostics] == [
        "network `m.net` has 1 error with this data set; the first, at line 1: input_shape [16, 16, 3] "
        "disagrees with the inferred shape [16, 16, 1]"
    ]
    report = check_path(str(_image_folder_scheme(tmp_path, net=SMALL_CNN.replace("out=2", "out=10"))))
    assert [d.message for d in report.diagnostics] == [
        "network `m.net` has 1 error with this data set; the first, at line 3: the network ends with shape "
        "[10], but the data set has 2 classes"
    ]
    # A size out of range is one error: the network is then checked by its own annotations only.
    report = check_path(str(_image_folder_scheme(tmp_path, size=0)))
    assert [d.message for d in report.diagnostics] == ["`size` must be >= 1, got 0"]


def test_a_network_trained_on_an_image_folder_is_verified_with_its_arguments(tmp_path):
    """A checkpoint records only its data set's name; ImageFolder's arguments are given with --dataset, in
    the language, as the scheme wrote them."""
    import torch
    from click.testing import CliRunner
    from PIL import Image

    from daic.compiler.commands.cli import main
    from daic.compiler.jobs.run import plan_run
    from daic.compiler.jobs.run.plan import lowered

    for split in ("train", "test"):
        for label, name in enumerate(("cat", "dog")):
            (tmp_path / "images" / split / name).mkdir(parents=True)
            Image.new("RGB", (20, 24), (200 * label, 0, 0)).save(tmp_path / "images" / split / name / "0.png")
    _, model = lowered(plan_run(str(_image_folder_scheme(tmp_path)), None, None))
    weights = tmp_path / "w.pt"
    torch.save({"model": model.state_dict(), "epsilon": 0.01, "dataset": "ImageFolder"}, weights)

    def daic(*args):
        return CliRunner().invoke(main, [str(a) for a in args])

    net = tmp_path / "m.net"
    result = daic("verify", net, "--weights", weights, "--out", tmp_path / "v.jsonl")
    assert (result.exit_code, result.stderr) == (
        2,
        "daic: the checkpoint's data set, ImageFolder, takes its images' shape and classes from its "
        "arguments: pass it as the scheme wrote it, "
        "--dataset 'ImageFolder(path=..., size=..., classes=...)'\n",
    )
    dataset = f'ImageFolder(path="{tmp_path / "images"}", size=16, classes=2)'
    result = daic("export", net, "--weights", weights, "--dataset", dataset, "--vnnlib", tmp_path / "p")
    assert result.exit_code == 0, result.output
    assert (
        (tmp_path / "p" / "prop_1.vnnlib").read_text().startswith("; daic export: image 1 of the ImageFolder")
    )
    # Other arguments are another network's input: its weights do not fit.
    result = daic("verify", net, "--weights", weights, "--dataset", dataset.replace("16", "8"))
    assert result.exit_code == 2
    assert "2.weight is [2, 256] in the checkpoint, [2, 64] in the network" in result.stderr


def fixes(text: str, language: str = "dai") -> list[tuple[str, str, str, str]]:
    """Each diagnostic's repair as data: (code, the text it replaces, the replacement, its title)."""
    report = check_source(Source(f"a.{language}", language, text))
    return [
        (d.code.id, text[d.fix.span.start : d.fix.span.end], d.fix.text, d.fix.title)
        for d in report.diagnostics
        if d.fix is not None
    ]


def test_a_certain_repair_travels_with_its_diagnostic():
    """Editors' quick fixes and tools read the repair from the diagnostic, not from its hint's text."""
    assert fixes("import stdlib.goals as g\nlet x = g.Basline\nlet y = Mix(Point, Box, wieght=0.5)\n") == [
        ("E101", "g.Basline", "g.Baseline", "Replace `g.Basline` by `g.Baseline`"),
        ("E103", "wieght", "weight", "Replace `wieght` by `weight`"),
    ]
    assert fixes("Linear out=10 input_shape=[8]\nReLu\n", "net") == [
        ("E102", "ReLu", "ReLU", "Replace `ReLu` by `ReLU`")
    ]
    assert fixes("Linear out=10 input_shape=[8]\nReLU\nLinear out=10 input_shape=[3, 3, 1]\n", "net") == [
        ("E131", "[3, 3, 1]", "[10]", "Replace input_shape by the inferred shape [10]")
    ]
    # No close name: a hint may list what there is, but no repair is certain.
    assert fixes("let x = Mix(Point, Box, zzz=1)\n") == []


def test_a_line_that_does_not_parse_is_not_also_a_network_without_layers():
    found = problems("Conv2D filters=16 kernel_size=[3, 3\n", "net")
    assert [(code, message) for code, message, _ in found] == [
        ("E005", "unexpected end of the line; expected `,` or `]`")
    ]
    assert [code for code, _, _ in problems("# nothing yet\n", "net")] == ["W202"]  # an empty file still is
