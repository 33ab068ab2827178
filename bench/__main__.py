"""`python -m bench`: the side-by-side comparison (bench/compare.py). `make bench` also runs bench/storm.py."""

from bench.compare import main

raise SystemExit(main())
