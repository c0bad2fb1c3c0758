"""Cold late-interaction searches, each a whole process: how long, and whether each exits cleanly.

Two measurements over one small colbert index (native engine) whose token vectors come from
all-MiniLM-L6-v2 (built here, in a temporary ``INDEXPLUG_HOME``, unless ``--home`` names one
already built; building it writes the ONNX export the query encoder runs): ``timing`` runs
``python -c "import indexplug_colbert.engines.native"`` (the store's libraries: numpy and the
engine's own modules; the floor), ``indexplug search`` and ``indexplug invoke search`` in turns
(``--with-torch`` adds the same search with its query embedded in torch); ``exits`` counts cold
``invoke search`` processes that abort or whose exit status does not match their answer (see
:mod:`indexplug.testing.coldbench`).

Usage::

    HF_HUB_OFFLINE=1 python plugins/colbert/bench/cold_search.py timing --runs 9
    HF_HUB_OFFLINE=1 python plugins/colbert/bench/cold_search.py exits --runs 200 --load 2
"""

from __future__ import annotations

from indexplug.testing.coldbench import main

if __name__ == "__main__":
    raise SystemExit(main("colbert", "indexplug_colbert.engines.native", __doc__.splitlines()[0]))
