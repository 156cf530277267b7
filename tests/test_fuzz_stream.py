"""Stream == one-shot, everywhere: a bounded, seeded part of the differential fuzz in
tests/fuzz_stream.py (mutated renders of every corpus template, and of formats the corpus
does not have, read whole and in pieces). A reproducer the fuzz prints becomes a test of
its own beside the rule it breaks (it has found none since these tests were written: the
draws test_random_arguments_stream_and_add_up keeps are the last ones).

In CI each family gets RUNS runs of its own seed (the same draws on every run); with
TPLPARSE_HYPOTHESIS=explore, $TPLPARSE_EXAMPLES times as many, from a seed of the clock. The
fuzz itself runs for as long as asked: `python tests/fuzz_stream.py --minutes 10 --unseen 3`.
"""

from __future__ import annotations

import random
import time

import pytest

import fuzz_stream
from conftest import HYPOTHESIS_PROFILE, corpus_compiled, corpus_ids, corpus_templates, examples, needs_corpus

TEMPLATES = corpus_templates()
RUNS = 24  # per family, and as many again on a format made from it that the corpus does not have


def _seed(stem):
    return fuzz_stream.family_seed(stem, int(time.time()) if HYPOTHESIS_PROFILE == "explore" else 0)


@needs_corpus
@pytest.mark.parametrize("stem", [p.stem for p in TEMPLATES], ids=corpus_ids(TEMPLATES))
def test_mutated_outputs_read_the_same_whole_and_in_pieces(stem):
    entry = corpus_compiled(stem)  # (the session's compile: tests/conftest.py)
    family = fuzz_stream.family_from(stem, entry.spec, entry.protocol, entry.outputs, entry.template.special_tokens)
    if not family.seeds:
        pytest.skip(f"{stem}: no renders to start from")
    seed = _seed(stem)
    families = [family]
    unseen = fuzz_stream.unseen_family(random.Random(seed), family, 0)
    if unseen is not None:
        families.append(unseen)
    found, count = fuzz_stream.run(families, seed, runs=examples(RUNS), log=None)
    assert count >= examples(RUNS) * len(families)
    assert found == [], f"seed {seed}: " + "\n".join(map(str, found))
