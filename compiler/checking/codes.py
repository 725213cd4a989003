"""Diagnostic codes of the compiler's phases (the parser's are in daic.dsl.diagnostics)."""

from daic.dsl import diagnostics as D
from daic.dsl.diagnostics import Code

UNKNOWN_NAME = Code("E101", "a name that is not defined (a let, an import, or a constructor)")
UNKNOWN_LAYER = Code("E102", "a layer kind the registry does not declare")
UNKNOWN_KEYWORD = Code("E103", "a keyword argument, layer parameter or scheme field that does not exist")
REPEATED = Code("E104", "the same argument, field or name given twice")
ARITY = Code("E105", "more positional arguments than the constructor takes")
MISSING = Code("E106", "a required argument, layer parameter or scheme field that is not given")
TYPE_MISMATCH = Code("E107", "a value of the wrong type (a goal where a schedule belongs, ...)")
OUT_OF_RANGE = Code("E108", "a value outside the range its parameter allows")
CYCLE = Code("E109", "lets, imports or scheme bases that refer to themselves")
IMPORT_NOT_FOUND = Code("E110", "an import or a net file that does not exist")
AMBIGUOUS = Code("E111", "a name that two imports define")
NOT_CALLABLE = Code("E112", "a call of something that is not a constructor")
BLOCK_STRUCTURE = Code("E120", "branch blocks out of order, or indented lines under a layer that takes none")
SHAPE = Code("E130", "a layer that cannot take the shape it receives")
ANNOTATION = Code("E131", "an input_shape annotation that disagrees with the inferred shape")
BRANCH_SHAPES = Code("E132", "branches whose outputs cannot be summed or concatenated")
CLASS_COUNT = Code("E133", "a network whose output width is not the data set's number of classes")
SPACE_NOT_ALLOWED = Code(
    "E140", "a search space where a single value must be (a .net layer, a scheme's data or tests, a study)"
)
STUDY = Code(
    "E141",
    "a study that cannot run as written (an objective that is not one of its scheme's tests, pruning several "
    "objectives, a grid over a continuous space, a scheme with nothing to tune)",
)
TAPS_ONLY_TRAIN = Code("E210", "a TAPS layer with only_train=False: its bounds are estimates, not bounds")
TAPS_PLACEMENT = Code("E211", "a second TAPS layer, or a TAPS layer inside a branch")
ABSTRACT_SIZE = Code("W201", "an abstract layer asking for more dimensions than the layer has")
EMPTY_NET = Code("W202", "a network with no layers")
SHORT_EPOCHS = Code("W203", "a scheme whose epochs end before one of its schedules stops changing")

ALL = [v for v in list(globals().values()) if isinstance(v, Code)]


def every_code() -> list[Code]:
    """Every diagnostic code, the parser's and the compiler's, in order."""
    return sorted([v for v in vars(D).values() if isinstance(v, Code)] + ALL, key=lambda c: c.id)
