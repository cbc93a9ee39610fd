"""``python -m api.cli``: the ``hitlflow`` command line."""

from api.cli.main import main

main()
