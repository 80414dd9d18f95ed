"""Protocol in Code: network protocols taught by reading small modules.

This distribution carries the QoS track, :mod:`protocol_in_code.qos`, with its arithmetic in a
native (Rust) core. The course's scripts import it exactly as they import the pure-Python
package.
"""
