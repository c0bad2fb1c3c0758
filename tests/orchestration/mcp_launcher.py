"""Start the indexplug CLI with the test-only backends registered (for subprocess tests)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from indexplug.cli.app import main
from orchestration_plugins import register

if __name__ == "__main__":
    register()
    main()
