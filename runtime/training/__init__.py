"""Training: a scheme's goals turned into losses, regularisers, schedules, optimizers and
initialisation, the loop that steps them, and its data-parallel form."""
