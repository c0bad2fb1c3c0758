"""Cold dense searches, each a whole process: how long, and whether every process exits cleanly.

Two measurements over one small chroma index embedded with all-MiniLM-L6-v2 (built here, in a
temporary ``INDEXPLUG_HOME``, unless ``--home`` names one already built): ``timing`` runs
``python -c "import chromadb"`` (the floor), ``indexplug search`` and ``indexplug invoke search``
in turns; ``exits`` counts cold ``invoke search`` processes that abort or whose exit status does
not match their answer (see :mod:`indexplug.testing.coldbench`).

Usage::

    HF_HUB_OFFLINE=1 python plugins/chroma/bench/cold_search.py timing --runs 9
    HF_HUB_OFFLINE=1 python plugins/chroma/bench/cold_search.py exits --runs 200 --load 2
"""

from __future__ import annotations

from indexplug.testing.coldbench import main

if __name__ == "__main__":
    raise SystemExit(main("chroma", "chromadb", __doc__.splitlines()[0]))
