"""TritonForge's Python side: the candidate executor (and, later, the policy worker).

Spawned by the `tritonforge` binary; speaks the newline-delimited JSON protocol
defined in `crates/protocol` and mirrored in `protocol.py`.
"""

__version__ = "0.1.0"
