"""`python -m servegate` is the `servegate` command."""

from servegate.cli.main import main

main()
