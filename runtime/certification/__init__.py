"""Certification: attacks that falsify, verification domains that bound margins, the per-image cascade,
complete search (branch and bound over ReLU splits or over the input box), properties beyond robustness,
and the evaluation of a trained network."""
