"""The peers' timing in `time_baselines` (CPU): every trial's timed calls cycle through `peer_draws` fresh draws of
the pool the solutions see, each draw checked against the reference, so a peer whose work follows the routing is
not timed on one routing alone."""
import torch

from sdk import definitions, peers
from sdk.bench.baselines import cycling, time_baselines
from sdk.bench.config import BenchConfig
from sdk.gate import contest_tolerance
from sdk.gate.judge import as_tuple
from tests.helpers import INDEXER, small_indexer


class _RecordingPeer(peers.Peer):
    """The reference itself as a peer; records the draw each prepared call belongs to and how often each runs.
    With `wrong_draw`, the call prepared for that draw of every trial returns a poisoned output."""

    name = "recording reference"
    definition = INDEXER

    def __init__(self, wrong_draw: int | None = None):
        self.wrong_draw = wrong_draw
        self.prepared: list[bytes] = []  # a fingerprint of each prepared draw's per-call inputs, in order
        self.runs: list[int] = []        # per prepared call, how many times it ran

    def available(self):
        return True, ""

    def _prepare(self, inputs):
        reference = definitions.reference(INDEXER)
        index = len(self.prepared)
        self.prepared.append(inputs["q_index_fp8"].float().numpy().tobytes())
        self.runs.append(0)
        wrong = self.wrong_draw is not None and index % BenchConfig().peer_draws == self.wrong_draw

        def run():
            self.runs[index] += 1
            out = as_tuple(reference(**inputs))
            return tuple(torch.full_like(t, -7) for t in out) if wrong else out
        return run


def _time(peer, monkeypatch, **config):
    monkeypatch.setattr(peers, "peers_for", lambda name: [peer])
    cfg = BenchConfig(trials=2, warmup=1, iters=16, budget_ms=None, reference=False, **config)
    return time_baselines(definitions.load(INDEXER), small_indexer(), seed=3, config=cfg, device="cpu",
                          peer_names=[peer.name], tol=contest_tolerance(INDEXER))["peers"][peer.name]


def test_a_peer_is_timed_over_fresh_draws_of_every_trial(monkeypatch):
    peer = _RecordingPeer()
    got = _time(peer, monkeypatch, peer_draws=4)
    assert got["status"] == "PASSED" and got["draws_per_trial"] == 4 and got["latency_ms"] > 0
    assert len(peer.prepared) == 2 * 4 and len(set(peer.prepared)) == 8, "each trial: four draws, none repeated"
    # Each prepared call ran once for its check; then warmup + sizing + 16 timed calls went round robin over the
    # trial's four, so every draw of a trial was timed about as often as the others.
    for trial in range(2):
        runs = peer.runs[4 * trial: 4 * trial + 4]
        assert min(runs) >= 1 + 16 // 4 and max(runs) - min(runs) <= 1, runs


def test_one_draw_is_the_old_behaviour(monkeypatch):
    peer = _RecordingPeer()
    got = _time(peer, monkeypatch, peer_draws=1)
    assert got["status"] == "PASSED" and got["draws_per_trial"] == 1 and len(peer.prepared) == 2


def test_a_peer_wrong_on_one_draw_fails_and_says_which(monkeypatch):
    got = _time(_RecordingPeer(wrong_draw=2), monkeypatch)
    assert got["status"] != "PASSED" and got["latency_ms"] is None
    assert got["reason"].startswith("trial 0 draw 2:"), got["reason"]


def test_cycling_runs_the_calls_round_robin():
    seen = []
    call = cycling([lambda i=i: seen.append(i) for i in range(3)])
    for _ in range(7):
        call()
    assert seen == [0, 1, 2, 0, 1, 2, 0]
