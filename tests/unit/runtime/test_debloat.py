"""Buffer debloating: the windows a receiver sizes by its throughput hold no more than its target
(or the floor), grow back when it is fast, and never leave a sender without credit while the
receiver takes everything; the intake that uses them withholds and returns credit accordingly,
tells its senders a row limit, and gives a replay the credit its logged takes need."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from peer.messaging.messages import Barrier, Batch
from peer.metrics import JOB, task_meters
from peer.runtime.debloat import (
    FLOOR,
    Ledger,
    Throughput,
    first_credit,
    row_limit,
    window,
)
from peer.runtime.emit import LOCAL_WINDOW, WINDOW
from peer.runtime.intake import DebloatedIntake, InboxIntake, intake_for
from tests.unit.runtime.test_parts import kind
from tests.unit.runtime.test_task import World, memory, run, runner

METERS = task_meters("j", "debloat")

rates = st.floats(0.001, 1e7, allow_nan=False)
targets = st.floats(0.01, 10.0, allow_nan=False)
senders = st.integers(1, 64)
rows = st.floats(1.0, 10_000.0, allow_nan=False)
ceilings = st.integers(1, 128)


@given(rates, targets, senders, rows, ceilings)
def test_a_window_holds_no_more_than_the_target_or_the_floor(rate, target, count, size, ceiling):
    w = window(rate, target, count, size, ceiling)
    assert min(FLOOR, ceiling) <= w <= ceiling
    assert w * size <= max(min(FLOOR, ceiling) * size, rate * target / count) * (1 + 1e-9)


@given(st.tuples(rates, rates), targets, senders, rows, ceilings)
def test_a_window_grows_back_with_the_rate(pair, target, count, size, ceiling):
    slow, fast = pair
    assume(slow <= fast)
    assert window(slow, target, count, size, ceiling) <= window(fast, target, count, size, ceiling)
    quick = 2 * ceiling * size * count / target
    assert window(quick, target, count, size, ceiling) == ceiling


@given(rates, targets)
def test_no_batch_is_longer_than_the_target(rate, target):
    limit = row_limit(rate, target)
    assert limit >= 1
    assert limit <= max(1, rate * target)


def test_an_edge_starts_at_the_floor_when_debloated_and_at_its_window_when_not():
    assert first_credit(WINDOW, 0.5) == first_credit(LOCAL_WINDOW, 0.5) == FLOOR
    assert first_credit(WINDOW, None) == WINDOW
    assert first_credit(1, 0.5) == 1


# -- the ledger against a model of its senders ------------------------------------------------


class Edges:
    """Senders that send while they have credit, through FIFO channels, to a receiver that keeps
    a Ledger and reports consumption as its inbox does (``returned`` once owed)."""

    def __init__(self, first: dict[int, int], ceilings: dict[int, int]) -> None:
        self.ledger = Ledger(first, ceilings)
        self.credit = dict(first)
        self.channel = dict.fromkeys(first, 0)
        self.consumed = dict.fromkeys(first, 0)
        self.taken = 0

    def outstanding(self, source: int) -> int:
        return self.credit[source] + self.channel[source]

    def send(self, source: int) -> None:
        self.channel[source] += self.credit[source]
        self.credit[source] = 0

    def take(self, source: int, n: int) -> list[int]:
        """The receiver takes up to n batches from ``source``; the grants that follow."""
        n = min(n, self.channel[source])
        self.channel[source] -= n
        self.consumed[source] += n
        self.taken += n
        owed = {s: c for s, c in self.consumed.items() if c >= self.ledger.owed_at[s]}
        for s in owed:
            self.consumed[s] = 0
        grants = self.ledger.returned(owed)
        for s, batches in grants:
            self.credit[s] += batches
        return [s for s, _ in grants]

    def conserved(self) -> bool:
        """What each sender has (credit, in its channel) is what the ledger counts."""
        return all(
            self.outstanding(s) == self.ledger.in_flight[s] - self.consumed[s] for s in self.credit
        )


actions = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 2)),
        st.tuples(st.just("take"), st.integers(0, 2), st.integers(0, 70)),
        st.tuples(st.just("resize"), st.integers(0, 2), st.integers(1, WINDOW)),
    ),
    max_size=60,
)


@given(actions, st.integers(1, WINDOW))
def test_the_ledger_withholds_over_the_window_and_never_starves_a_sender(steps, last):
    ceilings = {0: WINDOW, 1: LOCAL_WINDOW, 2: WINDOW}
    edges = Edges({s: first_credit(c, 0.5) for s, c in ceilings.items()}, ceilings)
    for step in steps:
        source = step[1]
        before = edges.outstanding(source)
        if step[0] == "send":
            edges.send(source)
        elif step[0] == "take":
            for granted in edges.take(source, step[2]):
                assert edges.outstanding(granted) == edges.ledger.windows[granted]
        else:
            edges.ledger.resize({source: min(step[2], ceilings[source])})
        assert edges.conserved()
        assert edges.outstanding(source) <= max(before, edges.ledger.windows[source])
    for source, ceiling in ceilings.items():
        edges.ledger.resize({source: min(last, ceiling)})
    for _ in range(3 * WINDOW):  # a receiver that takes everything: every sender goes on
        for source in ceilings:
            edges.send(source)
            edges.take(source, WINDOW)
            assert edges.credit[source] > 0
    for source, ceiling in ceilings.items():
        assert edges.outstanding(source) <= min(last, ceiling)


@given(st.integers(0, FLOOR), st.integers(1, 200))
def test_a_replay_gets_the_credit_its_logged_take_needs(taken, needed):
    ledger = Ledger({1: FLOOR}, {1: WINDOW})
    granted = ledger.ensure(1, taken, needed)
    assert ledger.in_flight[1] - taken >= needed
    assert granted == max(0, needed - (FLOOR - taken))
    assert ledger.owed_at[1] <= ledger.in_flight[1]


# -- the throughput meter ------------------------------------------------------------------------


def test_throughput_counts_busy_time_only():
    """100 rows every 0.07 s, a long idle gap, then the same: the gap is not work."""
    meter = Throughput(sample=0.1, weight=0.5)
    for start in (0.0, 9.0):
        for k in range(6):
            meter.took(start + 0.07 * k, 100)
        meter.took(start + 0.42, 0)
    assert abs(meter.rate - 100 / 0.07) < 1e-6 * meter.rate


def test_throughput_moves_towards_a_new_rate_by_samples():
    meter = Throughput(sample=0.1, weight=0.5)
    at = 0.0
    for _ in range(20):
        meter.took(at, 100)
        at += 0.01
    fast = meter.rate
    assert abs(fast - 100 / 0.01) < 1e-6 * fast
    rates = []
    for _ in range(40):
        if meter.took(at, 100):
            rates.append(meter.rate)
        at += 0.2
    assert fast > rates[0] > rates[1] > 500
    assert abs(rates[-1] - 500) < 1


# -- the debloated intake, on a clock of its own -----------------------------------------------


class Upstream:
    """One sender that sends batches of ``size`` rows while it has credit, and the clock of the
    receiver that reads them ``gap`` seconds apart."""

    def __init__(
        self, size: int, *, target: float = 0.3, gap: float = 0.07, engine: str = "python"
    ) -> None:
        self.size, self.gap, self.now = size, gap, 0.0
        self.credit = first_credit(WINDOW, target)
        self.limits: list[int] = []
        self.intake = intake_for(
            kind("function", batch_size=size, engine=engine), frozenset({1}), self.grant,
            METERS, target=target,
        )  # fmt: skip
        self.intake.clock = lambda: self.now
        self.sent = 0

    def grant(self, source: int, batches: int, rows: int) -> None:
        self.credit += batches
        self.limits.append(rows)

    def send(self) -> None:
        while self.credit > 0:
            self.credit -= 1
            self.sent += 1
            self.intake.deliver(1, Batch([{"n": self.sent}] * self.size))

    def queued(self) -> int:
        return sum(type(item) is Batch for item in self.intake.inbox.queues[1])

    def read(self) -> int:
        self.send()
        self.now += self.gap
        return len(self.intake.read())


def test_a_slow_receiver_keeps_its_sender_to_its_target_then_lets_it_grow_back():
    up = Upstream(100, target=0.3, gap=0.07)  # 100 rows every 0.07 s: 0.3 s is 4 batches
    assert isinstance(up.intake, DebloatedIntake)
    for _ in range(40):
        up.read()
    assert up.intake.ledger.windows[1] == 4
    assert up.credit + up.queued() <= 4
    assert up.intake.rows == int(100 / 0.07 * 0.3)
    up.gap = 0.001
    for _ in range(200):
        up.read()
    assert up.intake.ledger.windows[1] == WINDOW
    assert up.credit + up.queued() > FLOOR


def test_batches_longer_than_the_target_are_made_smaller():
    up = Upstream(1000, target=0.3, gap=0.7)  # 1000 rows every 0.7 s: 428 rows in 0.3 s
    for _ in range(10):
        up.read()
    assert up.limits[-1] == up.intake.rows == 428
    assert up.intake.limit == 428
    up.intake.follow(100)
    assert up.intake.limit == 100
    up.intake.follow(0)
    assert up.intake.limit == 428


def test_a_spark_task_keeps_its_batches_whole():
    """Each Spark batch costs Spark's scheduling: smaller ones would only cost throughput."""
    up = Upstream(1000, target=0.3, gap=0.7, engine="spark")
    for _ in range(10):
        up.read()
    assert up.intake.ledger.windows[1] == FLOOR
    assert set(up.limits) == {0}
    assert up.intake.limit == 1000


def test_a_replayed_take_larger_than_the_window_gets_its_credit():
    up = Upstream(10)
    assert up.credit == FLOOR
    counts = [(1, 6)]
    assert up.intake.read_exact(counts) is None  # the take needs 6, the window is 2
    up.send()
    batch = up.intake.read_exact(counts)
    assert batch is not None
    assert len(batch) == 60


def test_a_barrier_counts_the_batches_queued_ahead_of_it():
    intake = intake_for(kind("function"), frozenset({1}), lambda *g: None, METERS)
    assert type(intake) is InboxIntake
    for n in range(3):
        intake.deliver(1, Batch([{"n": n}]))

    def total() -> float:
        labels = {JOB: "j", "task": "debloat"}
        return REGISTRY.get_sample_value("onyx_barrier_queued_batches_sum", labels) or 0.0

    before = total()
    intake.deliver(1, Barrier(1))
    assert total() - before == 3


def test_a_new_sender_in_a_seat_is_counted_from_its_first_credit_and_the_old_ones_queue():
    """The old sender's queued batches will be taken as the new one's: the new one has its own
    first credit besides, and gets credit once what it has in flight is under its window."""
    grants: list[tuple[int, int, int]] = []
    intake = intake_for(
        kind("function", batch_size=1), frozenset({1}), lambda *g: grants.append(g), METERS,
        target=0.3,
    )  # fmt: skip
    for n in range(FLOOR):
        intake.deliver(1, Batch([{"n": n}]))
    intake.rekey(1, 7)
    assert intake.ledger.in_flight[7] == 2 * FLOOR
    while intake.read():
        pass
    assert intake.ledger.in_flight[7] - intake.inbox.consumed[7] == FLOOR
    for n in range(FLOOR):
        intake.deliver(7, Batch([{"n": n}]))
    while intake.read():
        pass
    assert [(source, batches) for source, batches, _ in grants] == [(7, 1), (7, 1)]


def test_a_new_sender_on_an_edge_of_another_window_is_given_that_window_not_the_old_ones():
    """The old sender ran in the receiver's group (a window of LOCAL_WINDOW), its replacement
    in another (WINDOW): the fixed windows being kept, the new one never has more in flight
    than its own edge's."""
    grants: list[tuple[int, int, int]] = []
    intake = intake_for(
        kind("function", batch_size=1), frozenset({1}), lambda *g: grants.append(g), METERS,
        window=lambda source: LOCAL_WINDOW if source == 1 else WINDOW,
    )  # fmt: skip
    assert LOCAL_WINDOW != WINDOW
    intake.rekey(1, 7)
    assert (intake.ledger.windows[7], intake.ledger.ceilings[7]) == (WINDOW, WINDOW)
    for n in range(WINDOW):
        intake.deliver(7, Batch([{"n": n}]))
    while intake.read():
        pass
    assert sum(batches for _, batches, _ in grants) <= WINDOW


# -- the runner: first credit, and the row limits its receivers ask for ------------------------


def test_a_debloated_peer_starts_each_edge_at_the_floor_and_reads_what_receivers_ask():
    world = World()
    r = runner(memory(100), world, batch=10, debloat=0.5)
    run(r, 20)
    assert [len(batch) for _, batch in world.batches()] == [10] * (2 * FLOOR - 1)
    assert r.emitter.credits == {"d1": 0, "d2": 1}  # batches take turns; d1 has none left

    def sizes(credits: dict[str, tuple[int, int]]) -> set[int]:
        before = len(world.batches())
        for peer, (batches, limit) in credits.items():
            r.credit(peer, batches, limit)
        run(r, 20)
        return {len(batch) for _, batch in world.batches()[before:]}

    assert sizes({"d1": (2, 3), "d2": (2, 0)}) == {3}
    assert sizes({"d1": (2, 3), "d2": (2, 5)}) == {3}
    assert sizes({"d1": (2, 0), "d2": (2, 0)}) == {10}
