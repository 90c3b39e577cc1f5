"""Causal logging: what a task must remember so that another peer can take its seat and redo
its work exactly, without the rest of the job rolling back.

A task's nondeterminism (the order it took batches in, what it read from the clock and from
randomness, when its timers fired) is logged as determinants (``determinants``), which ride
downstream as deltas and are kept there until the epoch they belong to commits. What a task sent
since its last commit stays in its in-flight log (``inflight``) so its upstream can resend it to
a replacement. The task's code reads the clock and randomness through its ``Recorder``
(``recorder``), which logs live and answers from the log while a replacement replays.

Everything here is pure bookkeeping: no sockets, no threads, no time but the recorder's.
"""
