"""Epidemic log sharing, a mode beside the classic reader that watches the log directory.

The writer of an entry gossips it (position and bytes) to a few random members, who pass it on
for a few rounds (``rumor``); each member keeps what arrives out of order in a bounded cache and
consumes strictly in order (``reorder``); when nothing has been consumed for a while it reads
ZooKeeper at the one position it needs next, never listing the directory (``fallback``).
These are pure: time is passed in, randomness comes from a ``random.Random`` passed in. ``wire``
writes and reads a rumor as it travels; ``feed`` puts it all together for a running member,
with the store and the transport as its only I/O.
"""
