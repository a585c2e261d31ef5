"""`python -m gateway.app` is the same as the `iris` console script."""

from gateway.app.cli import main

raise SystemExit(main())
