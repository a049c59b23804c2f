"""Choosing which queue a child claims from next, by weight.

Smooth weighted round-robin (the algorithm nginx uses for upstreams): every pick, each queue's
current score grows by its weight; the highest score wins and pays back the total. With weights
{pdf: 3, reports: 1} the picks run pdf, pdf, reports, pdf, ... : each queue gets exactly its
share of every `total weight` picks, spread out rather than in bursts, with no randomness to
make tests or operators guess.

A queue with nothing due is skipped for that claim (the next best score is tried), so an empty
queue never wastes its turn and a flooded one never starves the others: while both have work,
a weight-1 queue beside a weight-3 queue gets 1 claim in 4 whatever the backlog.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class WeightedQueues:
    def __init__(self, weights: Mapping[str, int]) -> None:
        if not weights:
            raise ValueError("at least one queue is needed")
        if any(w <= 0 for w in weights.values()):
            raise ValueError(f"weights must be positive: {dict(weights)}")
        self.weights = dict(weights)
        self.total = sum(self.weights.values())
        self._score = dict.fromkeys(self.weights, 0)

    def order(self) -> Iterator[str]:
        """Queues to try for the next claim: the weighted pick first, then the fall-throughs.

        Only the first queue pays for the pick; if it turns out empty, the caller moves on to
        the next without charging it, so an idle queue does not shift the others' shares.
        """
        for queue, weight in self.weights.items():
            self._score[queue] += weight
        ranked = sorted(self.weights, key=lambda q: -self._score[q])
        self._score[ranked[0]] -= self.total
        return iter(ranked)
