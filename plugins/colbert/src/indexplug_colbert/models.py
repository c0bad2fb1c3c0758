"""What the extra ops answer: the core's outcomes, under the names this plugin gave them.

``rerank`` answers a core :class:`~indexplug.outcomes.Searched` (or ``NoMatch``), so anything
that consumes search results consumes it unchanged.  ``explain`` answers the core's
:class:`~indexplug.outcomes.Explained`: for one passage, which passage token each query token
matched and how much that added to the MaxSim score, which is the reason late interaction is
inspectable at all.  Both are extension ops of the contract (``ALLOWED``), checked by the guard.
"""

from __future__ import annotations

from indexplug.outcomes import Explained, TokenMatch

Explanation = Explained
"""The answer of ``op_explain`` (the core's :class:`~indexplug.outcomes.Explained`)."""

__all__ = ["Explanation", "TokenMatch"]
