"""Three-colour meters: token buckets that judge packets (RFC 2697, RFC 2698, RFC 4115).

The course's refill lesson ends where these begin: RFC 2698 builds token-bucket refill into a
two-rate marker. A meter is two buckets counted in bytes and a rule that colours each packet:
GREEN (within the committed rate), YELLOW (within the excess or peak allowance), RED (beyond).

* :class:`SingleRateMeter` (RFC 2697, srTCM): one rate ``cir`` fills the committed bucket
  (``cbs``); only its overflow fills the excess bucket (``ebs``).
* :class:`TwoRateMeter` (RFC 2698, trTCM): a peak bucket (``pir``, ``pbs``) caps everything; a
  committed bucket (``cir``, ``cbs``) decides green.
* :class:`ExcessRateMeter` (RFC 4115): committed (``cir``, ``cbs``) and excess (``eir``,
  ``ebs``) buckets filling independently, decided like RFC 2697.

Every decision settles the buckets lazily to the packet's time, exactly: integer nanoseconds,
rates as exact fractions of bytes per second, remainders carried, no float anywhere (the same
settlement as :mod:`protocol_in_code.qos.limiter`). A new meter is full and starts counting at
its first packet (or at ``start_ns``).

``meter.mark(nbytes, now_ns=None, color=None)`` colours one packet (colour-aware when ``color``
is the colour it arrived with); ``meter.mark_many(sizes, times_ns, colors=None)`` colours a
whole trace from buffers of integers (numpy arrays, ``array.array``, ``memoryview``, lists)
with the GIL released, returning an ``array('B')`` of codes: ``COLORS[code]`` is the colour.
"""

from protocol_in_code._native import Color, ExcessRateMeter, SingleRateMeter, TwoRateMeter

#: The colours by their codes in ``mark_many``'s arrays.
COLORS = (Color.GREEN, Color.YELLOW, Color.RED)

__all__ = ["COLORS", "Color", "ExcessRateMeter", "SingleRateMeter", "TwoRateMeter"]
