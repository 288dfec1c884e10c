"""`python -m tripwire.bench`: see `tripwire.bench.cli`."""

from tripwire.bench.cli import main

raise SystemExit(main())
