"""``python -m aiorocket.cli``: the ``aiorocket`` command."""

from aiorocket.cli import main

if __name__ == "__main__":
    main()
