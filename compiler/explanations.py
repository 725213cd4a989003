"""Why each diagnostic code is reported, with examples: generated from tests/compiler/golden
by tests/compiler/test_explain.py (DAIC_UPDATE_GOLDEN=1 rewrites it). Do not edit; explain.py reads it."""

# ruff: noqa: E501
# fmt: off

EXPLANATIONS = {
    'E001': (
        ('daic reads sources as UTF-8 text. A file saved in another encoding (Latin-1, by an old editor) or a binary file holds bytes that are not UTF-8; daic names the first rather than guess what the text says.', 'E001_encoding.dai', 5, 'let name = "caf�"\n', 'E001_encoding.dai:5:16: error[E001]: cannot read as text: byte 0xe9 is not valid UTF-8\n  hint: daic reads source files as UTF-8 text\n\n'),
    ),
    'E002': (
        ('A character that starts no token of the language: it can be in a comment or a string, nowhere else.', 'E002_unexpected_character.dai', 4, 'let price = $5\n', 'E002_unexpected_character.dai:4:13: error[E002]: unexpected character `$`\n 4 | let price = $5\n   |             ^\n\n'),
    ),
    'E003': (
        ('The tokens are known but not in an order the grammar allows; the message lists what could come there.', 'E003_unexpected_token.dai', 4, 'let g = Mix(Point Box, 0.5)\n', 'E003_unexpected_token.dai:4:19: error[E003]: unexpected `Box`; expected `(`, `)`, `,` or `=`\n 4 | let g = Mix(Point Box, 0.5)\n   |                   ^^^\n  hint: the `(` at 4:12 is never closed\n\n'),
    ),
    'E004': (
        ('The file (or a .dai statement) ends before what it started is complete.', 'E004_unexpected_end.dai', 3, 'let g =\n', 'E004_unexpected_end.dai:3:7: error[E004]: unexpected end of the file; expected `(`, `False`, `True`, `[`, a name, a number or a string\n 3 | let g =\n   |       ^\n\n'),
    ),
    'E005': (
        ('A bracket opened and never closed: everything after it is read as inside it, so the message points at the bracket itself.', 'E005_unclosed_bracket.dai', 4, 'let g = Mix(Point, Box, 0.5\n\nlet h = Box\n', 'E005_unclosed_bracket.dai:4:27: error[E005]: unexpected end of the statement; expected `)` or `,`\n 4 | let g = Mix(Point, Box, 0.5\n   |                           ^\n  hint: the `(` at 4:12 is never closed\n\n'),
    ),
    'E006': (
        ('Indentation puts a line in the branch of the block head above it. A line indented to a depth that no enclosing block has belongs nowhere.', 'E006_indentation.net', 4, 'ParNet1\n        ReLU\n    ReLU\nParNet2\nParSum\n', 'E006_indentation.net:6:1: error[E006]: this indentation matches no enclosing block\n 6 |     ReLU\n   | ^^^^\n  hint: indent as far as one of the enclosing blocks: 0 or 8 characters\n\n'),
    ),
    'E007': (
        ('Tabs and spaces count differently in different editors, so a file that indents with both does not show the nesting it has.', 'E007_mixed_indentation.net', 4, 'ParNet1\n\tReLU\nParNet2\n    ReLU\nParSum\n', 'E007_mixed_indentation.net:7:1: error[E007]: indentation mixes tabs and spaces\n 7 |     ReLU\n   | ^^^^\n  hint: indent with 4 spaces\n\n'),
    ),
    'E008': (
        ("Brackets nested more than 64 deep, operator chains of more than 200, or blocks nested more than 64 deep: no real source needs them, and checking them would recurse past Python's limit.", 'E008_nesting_too_deep.dai', 4, 'let x = (((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))\n', 'E008_nesting_too_deep.dai:4:73: error[E008]: brackets nested more than 64 levels deep\n 4 | let x = (((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1)))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))\n   |                                                                         ^\n  hint: name the inner parts with `let`\n\n'),
    ),
    'E009': (
        ("The paper's listings were printed by a program that sometimes left a format placeholder (`%s`) or a Python object's repr (`<function relu at 0x...>`) where a value belongs. Neither is a value; write the value it stood for.", 'E009_not_a_value.net', 5, 'Linear out=%d\n', 'E009_not_a_value.net:5:12: error[E009]: `%d` is not a value\n 5 | Linear out=%d\n   |            ^^\n  hint: a format placeholder left unfilled; write the value it stood for\n\n'),
    ),
    'E010': (
        ('A number literal too large for a 64-bit float would become infinity.', 'E010_number_out_of_range.dai', 3, 'let big = 1e999\n', 'E010_number_out_of_range.dai:3:11: error[E010]: number `1e999` is too large for a float\n 3 | let big = 1e999\n   |           ^^^^^\n\n'),
    ),
    'E011': (
        ('Positional arguments bind to parameters in order, so they come before every keyword argument; after one, their parameters are unclear.', 'E011_positional_after_keyword.dai', 4, 'let g = Mix(g1=Point, Box, 0.5)\n', 'E011_positional_after_keyword.dai:4:23: error[E011]: positional arguments after the keyword argument `g1`\n 4 | let g = Mix(g1=Point, Box, 0.5)\n   |                       ^^^^^^^^\n  hint: put positional arguments first, or name these too\n\n'),
    ),
    'E012': (
        ("A string is one line between double quotes; this one's line ends before its closing quote.", 'E012_unterminated_string.dai', 3, 'let path = "nets/mine.net\n', 'E012_unterminated_string.dai:3:12: error[E012]: string literal is not closed on its line\n 3 | let path = "nets/mine.net\n   |            ^\n  hint: strings are one line in double quotes: "like this"\n\n'),
    ),
    'E013': (
        ('In a string, a backslash starts an escape (\\n, \\t, \\\\, \\"). A backslash before any other character is a mistake, usually a Windows path: write paths with `/`.', 'E013_unknown_escape.dai', 4, 'let path = "nets\\resnet18.net"\n', 'E013_unknown_escape.dai:4:17: error[E013]: `\\r` is no escape in a string\n 4 | let path = "nets\\resnet18.net"\n   |                 ^^\n  hint: write paths with `/`; a backslash itself is `\\\\`\n\n'),
    ),
    'E014': (
        ("The file exists but cannot be read: its permissions forbid it, or it went away while daic was checking. This example's file was made unreadable to show the message.", 'E014_unreadable.dai', 4, 'let g = Box\n', 'E014_unreadable.dai:1:1: error[E014]: cannot read: Permission denied\n\n'),
    ),
    'E101': (
        ('A name must be a let of this file, a let of an import, or a constructor of the language. A misspelt name stands for nothing, so the checker names the closest one that exists.', 'E101_unknown_name.dai', 4, 'let g = Mix(Piont, Box, 0.5)\n', 'E101_unknown_name.dai:4:13: error[E101]: unknown name `Piont`\n 4 | let g = Mix(Piont, Box, 0.5)\n   |             ^^^^^\n  hint: did you mean `Point`?\n\n'),
    ),
    'E102': (
        ('Every line of a .net file is a layer kind that the language declares (`daic doc` lists them). An unknown kind has no shape and no PyTorch module; the hint names the closest known kind.', 'E102_unknown_layer.net', 4, 'Conv2D filters=4 kernel_size=3 input_shape=[8, 8, 1]\nRelu\n', 'E102_unknown_layer.net:5:1: error[E102]: unknown layer `Relu`\n 5 | Relu\n   | ^^^^\n  hint: did you mean `ReLU`?\n\n'),
    ),
    'E103': (
        ('Keyword arguments, layer parameters and scheme fields must be ones the constructor declares. A misspelt keyword would otherwise leave the parameter it meant at its default without a word.', 'E103_unknown_keyword.dai', 4, 'let attack = MIFGSM(k=20, momentum=0.8)\n', 'E103_unknown_keyword.dai:4:27: error[E103]: `MIFGSM` has no argument `momentum`\n 4 | let attack = MIFGSM(k=20, momentum=0.8)\n   |                           ^^^^^^^^\n  hint: `MIFGSM` takes k, mu, step\n\n'),
    ),
    'E104': (
        ('An argument, layer parameter or scheme field given twice leaves open which value was meant; daic does not choose one for you.', 'E104_repeated_keyword.net', 4, 'Linear out=10 out=20 input_shape=[64]\n', 'E104_repeated_keyword.net:4:15: error[E104]: parameter `out` is given twice\n 4 | Linear out=10 out=20 input_shape=[64]\n   |               ^^^\n\n'),
    ),
    'E105': (
        ('A call gives more positional arguments than the constructor takes: the extra ones have no parameter to bind to, and the order of the others is probably not the one meant.', 'E105_arity.dai', 4, 'let g = Sub(0.5, Box, Point)\n', 'E105_arity.dai:4:23: error[E105]: `Sub` takes at most 2 positional arguments (delta, g), got 3\n 4 | let g = Sub(0.5, Box, Point)\n   |                       ^^^^^\n\n'),
    ),
    'E106': (
        ('A required argument, layer parameter or scheme field has no default: without it the schedule, layer or scheme is not defined. A scheme may inherit fields from the scheme it extends.', 'E106_missing_argument.dai', 4, 'let w = Lin(0, 1)\n\nscheme S {\n    goal = Box\n    data = Digits\n    epsilon = 0.1\n}\n', 'E106_missing_argument.dai:4:9: error[E106]: `Lin` is missing argument `steps` (Float)\n 4 | let w = Lin(0, 1)\n   |         ^^^^^^^^^\n\nE106_missing_argument.dai:6:8: error[E106]: scheme `S` is missing field `epochs` (Int)\n 6 | scheme S {\n   |        ^\n\n'),
        ("AvgPool2D has no default kernel, and the paper's DenseNet-100 listing prints three without one. When a later input_shape annotation implies the kernel, the hint says which.", 'E106_pooling_kernel.net', 4, 'Conv2D filters=4 kernel_size=[3, 3] input_shape=[32, 32, 3] padding=1\nAvgPool2D\nConv2D filters=4 kernel_size=[1, 1] input_shape=[17, 17, 4]\n', 'E106_pooling_kernel.net:5:1: error[E106]: `AvgPool2D` is missing parameter `kernel_size` (Int or List[Int])\n 5 | AvgPool2D\n   | ^^^^^^^^^\n  hint: the next input_shape annotation ([17, 17, 4]) implies kernel_size=[2, 2] with padding=1; write it out\n\n'),
    ),
    'E107': (
        ('Every parameter has a type: a goal, a schedule, a number, a data set. A value of another type would fail or mean something else when the scheme runs. A number may stand where a schedule is expected (Int <: Float <: Schedule), not the other way round.', 'E107_type_mismatch.dai', 5, 'let g = Mix(Point, Box, Box)\nlet h = Sub(Box, Lin(0, 1, 10))\n', 'E107_type_mismatch.dai:5:25: error[E107]: expected a Schedule, found a Goal `Box`\n 5 | let g = Mix(Point, Box, Box)\n   |                         ^^^\n\nE107_type_mismatch.dai:6:13: error[E107]: expected a Schedule, found a Goal `Box`\n 6 | let h = Sub(Box, Lin(0, 1, 10))\n   |             ^^^\n\nE107_type_mismatch.dai:6:18: error[E107]: expected a Goal, found a Schedule `Lin`\n 6 | let h = Sub(Box, Lin(0, 1, 10))\n   |                  ^^^^^^^^^^^^^\n\n'),
    ),
    'E108': (
        ('Parameters have ranges: a mixing weight lies in [0, 1], epsilon is above 0, an attack runs at least one step. A value outside would train or certify something meaningless. A schedule is held to the range at every value it moves between.', 'E108_out_of_range.dai', 5, 'let a = IFGSM(-1)\nlet b = Mix(Point, Box, 1.5)\n\nscheme S {\n    data = Digits\n    epsilon = 0\n    goal = Box\n    epochs = 1\n}\n', 'E108_out_of_range.dai:5:15: error[E108]: `k` must be >= 1, got -1\n 5 | let a = IFGSM(-1)\n   |               ^^\n\nE108_out_of_range.dai:6:25: error[E108]: `weight` must be in [0, 1], got 1.5\n 6 | let b = Mix(Point, Box, 1.5)\n   |                         ^^^\n\nE108_out_of_range.dai:10:15: error[E108]: `epsilon` must be > 0, got 0\n 10 |     epsilon = 0\n    |               ^\n\n'),
    ),
    'E109': (
        ('Two files that import each other form a circle: neither can be checked before the other. Move what both need into a third file that each imports.', 'E109_cyclic_import_a.dai', 4, 'import "E109_cyclic_import_b.dai"\n', 'E109_cyclic_import_a.dai:4:8: error[E109]: importing `E109_cyclic_import_b.dai` leads back to this file (E109_cyclic_import_a.dai -> E109_cyclic_import_b.dai -> E109_cyclic_import_a.dai)\n 4 | import "E109_cyclic_import_b.dai"\n   |        ^^^^^^^^^^^^^^^^^^^^^^^^^^\n\n'),
        ('Lets, imports and scheme bases that lead back to themselves have no value to start from; the message lists the chain that closes the circle.', 'E109_cyclic_let.dai', 4, 'let a = Mix(Point, b, 0.5)\nlet b = Sub(0.5, a)\n', 'E109_cyclic_let.dai:4:5: error[E109]: `a` is defined in terms of itself (a -> b -> a)\n 4 | let a = Mix(Point, b, 0.5)\n   |     ^\n\n'),
    ),
    'E110': (
        ("An import names a module of the standard library (`stdlib.goals`) or a .dai file, relative to the importing file; a scheme's `net` names a .net file the same way. A path that does not exist, or that the file system refuses to look up (a name too long), is reported at the string that names it.", 'E110_import_not_found.dai', 6, 'import stdlib.gaols\nimport "nowhere.dai"\n', 'E110_import_not_found.dai:6:8: error[E110]: no module `stdlib.gaols`\n 6 | import stdlib.gaols\n   |        ^^^^^^^^^^^^\n  hint: did you mean `goals`?\n\nE110_import_not_found.dai:7:8: error[E110]: no file `nowhere.dai` (looked in .)\n 7 | import "nowhere.dai"\n   |        ^^^^^^^^^^^^^\n\n'),
    ),
    'E111': (
        ('Two imports without `as` both define the name, so a plain use of it could mean either. Import one of them with `as` and write its qualified name.', 'E111_ambiguous.dai', 4, 'import stdlib.goals\nimport "E111_other.dai"\n\nlet g = Baseline\n', 'E111_ambiguous.dai:7:9: error[E111]: `Baseline` is defined by more than one import (stdlib.goals, E111_other.dai)\n 7 | let g = Baseline\n   |         ^^^^^^^^\n  hint: import one of them with `as` and write its qualified name\n\n'),
    ),
    'E112': (
        ('Only constructors take arguments. A let already holds a value (a schedule, a goal); calling it would not make a new one. Use the let as it is, or call the constructor it was built with.', 'E112_not_callable.dai', 4, 'let ramp = Lin(0, 1, 10)\nlet g = Sub(ramp(2), Box)\n', 'E112_not_callable.dai:5:13: error[E112]: `ramp` is a let, not a constructor; it cannot be called\n 5 | let g = Sub(ramp(2), Box)\n   |             ^^^^\n  hint: use it without arguments: `ramp`\n\n'),
    ),
    'E120': (
        ('Residual and concatenating blocks are three lines, ParNet1 / ParNet2 / ParSum and SkipNet1 / SkipNet2 / SkipCat, with each branch indented under its head. The message names the part that is missing and where the block began. Other layers take no indented lines.', 'E120_block_structure.net', 5, 'ParNet1\n    ReLU\nParSum\nReLU\n    Linear out=3\n', 'E120_block_structure.net:7:1: error[E120]: `ParNet2` missing before `ParSum` (the block that `ParNet1` opens at line 5)\n 7 | ParSum\n   | ^^^^^^\n  hint: a block is ParNet1 / ParNet2 / ParSum\n\nE120_block_structure.net:9:5: error[E120]: `ReLU` takes no indented lines\n 9 |     Linear out=3\n   |     ^^^^^^^^^^^^\n  hint: only ParNet1, ParNet2, SkipNet1 and SkipNet2 have branches\n\n'),
    ),
    'E130': (
        ('Each layer takes inputs of certain shapes: a convolution needs an image, a pooling window must fit in it. The shape inferred from the input up to this layer does not fit it.', 'E130_shape.net', 4, 'Linear out=100 input_shape=[8, 8, 1]\nConv2D filters=4 kernel_size=[3, 3]\n', 'E130_shape.net:5:1: error[E130]: `Conv2D` cannot take input [100]: it needs an image (height, width, channels); flatten only with Linear or Flatten\n 5 | Conv2D filters=4 kernel_size=[3, 3]\n   | ^^^^^^\n\n'),
    ),
    'E131': (
        ('An input_shape annotation ([height, width, channels]) states what a layer receives. When it disagrees with the shape the layers before it produce, one of the two is not what its author thinks; the quick fix writes the inferred shape.', 'E131_annotation.net', 5, 'Conv2D filters=16 kernel_size=[3, 3] input_shape=[32, 32, 3] stride=[2, 2] padding=1\nConv2D filters=16 kernel_size=[3, 3] input_shape=[32, 32, 16] padding=1\n', 'E131_annotation.net:6:50: error[E131]: input_shape [32, 32, 16] disagrees with the inferred shape [16, 16, 16]\n 6 | Conv2D filters=16 kernel_size=[3, 3] input_shape=[32, 32, 16] padding=1\n   |                                                  ^^^^^^^^^^^^\n  hint: the layers before produce [16, 16, 16] ([height, width, channels])\n\n'),
    ),
    'E132': (
        ('ParSum adds the outputs of its two branches, so they must have the same shape; SkipCat concatenates images along their channels, so their heights and widths must agree.', 'E132_branch_shapes.net', 4, 'Conv2D filters=16 kernel_size=[3, 3] input_shape=[32, 32, 3] padding=1\nParNet1\n    Conv2D filters=32 kernel_size=[1, 1]\nParNet2\nParSum\nSkipNet1\n    Conv2D filters=8 kernel_size=[3, 3] stride=[2, 2] padding=1\nSkipNet2\nSkipCat dim=1\n', 'E132_branch_shapes.net:8:1: error[E132]: cannot sum branches of shapes [32, 32, 32] and [32, 32, 16]\n 8 | ParSum\n   | ^^^^^^\n  hint: both branches of a residual block must produce the same shape\n\n'),
    ),
    'E133': (
        ('A classifier ends with one output per class of its data set, or its loss cannot be computed. A scheme checks the network it names against its data set.', 'E133_class_count.dai', 4, 'scheme S {\n    net = "E133_class_count.net"\n    data = Digits\n    epsilon = 0.1\n    goal = Box\n    epochs = 1\n}\n', 'E133_class_count.dai:5:11: error[E133]: network `E133_class_count.net` has 1 error with this data set; the first, at line 3: the network ends with shape [12], but the data set has 10 classes\n 5 |     net = "E133_class_count.net"\n   |           ^^^^^^^^^^^^^^^^^^^^^^\n  hint: end with `Linear out=10`\n\n'),
    ),
    'E210': (
        ("TAPS trains the layers after it on margins found by an attack in the latent box: estimates of the worst case, not bounds of it. At test time they would certify what was never proved, so TAPS acts only while training; only_train=False is refused (leave it out: TAPS's default is True).", 'E210_taps_only_train.net', 5, 'Linear out=32 input_shape=[8, 8, 1]\nReLU\nTAPS steps=10 only_train=False\nLinear out=16\nReLU\nLinear out=10\n', "E210_taps_only_train.net:7:15: error[E210]: `TAPS` with only_train=False would act at test time, where its margins would be read as bounds\n 7 | TAPS steps=10 only_train=False\n   |               ^^^^^^^^^^^^^^^^\n  hint: TAPS's bounds are estimates, not bounds: it may only shape training\n\n"),
    ),
    'E211': (
        ("The layers after TAPS are the classifier that its latent attack runs through, up to the network's output. Inside a branch of a residual or concatenating block they would end at the block, so TAPS must stand on the main path, before or after the block.", 'E211_taps_in_branch.net', 5, 'Linear out=16 input_shape=[8, 8, 1]\nReLU\nParNet1\n    Linear out=16\n    TAPS\n    ReLU\nParNet2\nParSum\nLinear out=10\n', 'E211_taps_in_branch.net:9:5: error[E211]: `TAPS` inside the `ParNet1` branch of the block at line 7\n 9 |     TAPS\n   |     ^^^^\n  hint: TAPS splits the whole network: put it on the main path, before or after the block\n\n'),
        ('TAPS splits a network once: the layers before it are trained with interval bounds, those after it with the latent attack. A second TAPS would split the classifier again, which TAPS does not define.', 'E211_taps_twice.net', 4, 'Linear out=32 input_shape=[8, 8, 1]\nReLU\nTAPS\nLinear out=16\nReLU\nTAPS\nLinear out=10\n', 'E211_taps_twice.net:9:1: error[E211]: a second `TAPS` layer: the network is already split at line 6\n 9 | TAPS\n   | ^^^^\n  hint: TAPS splits a network once, into a feature extractor and a classifier; keep one\n\n'),
    ),
    'W201': (
        ('An abstract layer correlating more dimensions than the layer before has correlates all of them. That is allowed, but it is probably not what the number meant, so it is a warning.', 'W201_abstract_size.net', 4, 'Linear out=16 input_shape=[64]\nReLU\nCorrMaxK only_train=True num_correlate=32\nLinear out=10\n', 'W201_abstract_size.net:6:26: warning[W201]: num_correlate=32 is more than the 16 dimensions of the layer before\n 6 | CorrMaxK only_train=True num_correlate=32\n   |                          ^^^^^^^^^^^^^^^^\n  hint: all 16 dimensions will be correlated\n\n'),
    ),
    'W202': (
        ('A network file without layers classifies nothing. It is allowed (an empty file, or one being written) but reported as a warning.', 'W202_empty_net.net', 4, '# The layers go here.\n', 'W202_empty_net.net:1:1: warning[W202]: the network has no layers\n 1 | # A network file without layers classifies nothing. It is allowed (an empty file, or one being\n   | ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n\n'),
    ),
}
# fmt: on
