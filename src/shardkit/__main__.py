"""``python -m shardkit``: the same as the ``shardkit`` command."""

from shardkit.cli import main

if __name__ == "__main__":
    main()
