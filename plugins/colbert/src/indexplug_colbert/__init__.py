"""indexplug-colbert: late interaction (ColBERT MaxSim) behind the indexplug contract."""

from indexplug_colbert.backend import SCALE, ColbertBackend
from indexplug_colbert.models import Explanation, TokenMatch

__all__ = ["SCALE", "ColbertBackend", "Explanation", "TokenMatch"]
