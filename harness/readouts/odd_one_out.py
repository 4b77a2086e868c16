"""Cosine odd-one-out: the zero-shot encoder readout for triplet tasks (Muttenthaler et al. 2023).

The three parts of a stimulus (``Stimulus.parts``, already in montage order) are embedded; the
most cosine-similar pair is taken to belong together and the third part is the odd one out. The
response is its montage position 1, 2 or 3, the same numbering the prompt models answer in, so
``option_order`` maps both back to the original items identically.

An exact tie for the most similar pair keeps the first pair in the order (1,2), (1,3), (2,3) and
is flagged in ``extras['tie']``; a part with a zero embedding has no cosine and gives a null.
"""

from __future__ import annotations

import numpy as np

from .base import Readout, Response
from .probes import l2_normalise

PAIRS = ((0, 1), (0, 2), (1, 2))  # montage positions (0-based) of each candidate pair
ODD = (3, 2, 1)  # the position (1-based) left out by each pair


def odd_one_out(embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 3, d) part embeddings -> (odd positions 1..3, (n, 3) pair similarities)."""
    z = l2_normalise(np.asarray(embeddings, dtype=np.float64))
    sims = np.stack([(z[:, a] * z[:, b]).sum(axis=-1) for a, b in PAIRS], axis=1)
    return np.array(ODD)[sims.argmax(axis=1)], sims


class CosineOddOneOut(Readout):
    name = "odd_one_out"
    capability = "embed"
    reads = "parts"

    def respond(self, model, batch):
        for s in batch:
            if len(s.part_sources) != 3:
                raise ValueError(f"{self.stimset.task_id}/{s.stimulus_id}: odd-one-out needs 3 "
                                 f"part images, got {len(s.part_sources)}")
        emb = np.asarray(model.embed([p for s in batch for p in s.parts]))
        emb = emb.reshape(len(batch), 3, -1)
        odd, sims = odd_one_out(emb)
        degenerate = ((np.linalg.norm(emb, axis=-1) == 0).any(axis=1)
                      | ~np.isfinite(emb).all(axis=(1, 2)))
        out = []
        for i in range(len(batch)):
            if degenerate[i]:
                out.append(Response(response=None, parse_status="null:degenerate_embedding"))
                continue
            extras = {"cosine_12_13_23": [round(float(x), 6) for x in sims[i]],
                      "tie": bool(np.sum(sims[i] == sims[i].max()) > 1)}
            out.append(Response(response=int(odd[i]), extras=extras))
        return out
