"""`python -m gateway` is the same as the `iris` console script."""

from gateway.cli import main

raise SystemExit(main())
