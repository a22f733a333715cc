"""`python -m turnledger ...`: the same entry point as the `turnledger` script."""

from turnledger.cli import main

main()
