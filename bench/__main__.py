"""`python -m bench` (`make bench`): the benchmarks that print tables. See bench/*.py."""

import sys

from bench.storm import main

sys.exit(main(sys.argv[1:]))
