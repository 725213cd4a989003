"""Complete verification: searches that split what they bound until every image is decided or their time
is spent. `BranchAndBound` splits ReLUs, `InputSplit` the input box; both are policies over one `Frontier`
of open subdomains (tensors, every image of a batch in one), one `Budget` of time, the shared bounding
(`bounding`, its results cut and reordered in `bounded`), attacks and witnesses (`images`)."""

from daic.runtime.certification.search.branch_and_bound import BranchAndBound
from daic.runtime.certification.search.budget import ATTACK_SHARE, Budget
from daic.runtime.certification.search.input_split import InputSplit
from daic.runtime.certification.search.leaves import exact_leaf
from daic.runtime.certification.search.policy import Search
from daic.runtime.certification.search.root import refined_intermediates

__all__ = [
    "ATTACK_SHARE",
    "BranchAndBound",
    "Budget",
    "InputSplit",
    "Search",
    "exact_leaf",
    "refined_intermediates",
]
